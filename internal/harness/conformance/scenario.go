package conformance

import (
	"bufio"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest"
)

// Scenario is one fault, read from a text file under testdata/: the
// server's script, the client's steps, and the expected outcome and
// copies per network and client. The same type and the same runner serve
// HTTP/1.1, HTTP/2 and HTTP/3.
//
// A file is a list of directives, one per line, then a line "----" and
// the expectations, which `go test ./internal/harness/conformance -rewrite`
// regenerates from what the runs did:
//
//	title   GET, close crosses the request
//	proto   h1                       (h1, h2 or h3)
//	nets    tcp tls                  (optional; default: every network of proto)
//	clients replaysafe net/http      (optional; default: every client of proto)
//	conn    ok crossing              (connection 0's actions, request by request)
//	conn    ok                       (connection 1; later ones repeat the last, or answer 200)
//	default refuse                   (every stream of every connection beyond the conn lines)
//	server  refuse-body-before-ack   (server options, see serverOptions)
//	proxy   idle-cut                 (a CONNECT proxy in front: idle-cut or auth)
//	option  disable-resend           (replaysafe options; peers are then n/a)
//	peer-deadline 2s                 (bounds each peer's target call)
//	peer-runs 2                      (caps each peer's runs)
//	step    warm                     (client steps, in order; see steps)
//	step    target POST buffered Idempotency-Key=k-1
//	----
//	tcp replaysafe 200 copies=2 rules=RS20,RS02
//	tcp net/http   200 copies=2
//
// An expectation is "NET CLIENT OUTCOME copies=N [rules=R]" (OUTCOME is a
// status or "error"; rules only for replaysafe), "NET CLIENT measured"
// (a peer shown, not checked; never replaysafe, whose every row is
// checked) or "NET CLIENT n/a" (the client has no such setting). Lines
// starting with # are comments. The file name, without .txt, is the
// scenario's ID.
type Scenario struct {
	// ID names the scenario in case names ("get-crossing").
	ID string
	// Title says what happens, in words.
	Title string
	// Proto is the protocol: ProtoH1, ProtoH2 or ProtoH3.
	Proto string
	// Nets lists the networks the scenario runs over.
	Nets []string
	// Clients lists the clients, replaysafe first.
	Clients []string
	// Conns holds each scripted connection's action names; Default the
	// action of every stream beyond them (HTTP/2, HTTP/3).
	Conns   [][]string
	Default string
	// Server holds server options ("refuse-body-before-ack",
	// "max-requests=10", "initial-window=1024").
	Server []string
	// Proxy names the proxy in front of the origin, or "".
	Proxy string
	// Options holds replaysafe options ("disable-resend",
	// "retry-policy"); with any, only replaysafe runs.
	Options []string
	// Steps are the client's steps, each a name and its arguments.
	Steps [][]string
	// PeerDeadline bounds each peer's target call, when set.
	PeerDeadline time.Duration
	// PeerRuns caps each peer's runs, when set.
	PeerRuns int
	// Expect holds the expectations, in file order.
	Expect []Expectation

	// head is the file up to and including the "----" line, kept as it
	// is when expectations are rewritten.
	head string
}

// Expectation is what every run of a case does with one client.
type Expectation struct {
	// Net and Client name the network and the client.
	Net, Client string
	// Measured marks a peer shown, not checked; NA a client that does not
	// run the scenario.
	Measured, NA bool
	// Want is the expected outcome, when neither Measured nor NA.
	Want Want
}

// Want is the expected outcome of every run of a case for one client.
type Want struct {
	// Status is the final status, or 0 for an error.
	Status int `json:"status"`
	// Rules lists, for replaysafe, the rule ID that ended each wire
	// attempt, joined by ","; for example "RS20,RS02" for a resend that
	// delivered. Empty for the peers.
	Rules string `json:"rules,omitempty"`
	// Copies is the number of copies of the target request the server
	// received (for a burst, the most any one request got).
	Copies int `json:"copies"`
}

// String prints w as an expectation's tail: "200 copies=2 rules=RS02".
func (w Want) String() string {
	s := "error"
	if w.Status != 0 {
		s = strconv.Itoa(w.Status)
	}
	s += " copies=" + strconv.Itoa(w.Copies)
	if w.Rules != "" {
		s += " rules=" + w.Rules
	}
	return s
}

// Protocols.
const (
	ProtoH1 = "h1"
	ProtoH2 = "h2"
	ProtoH3 = "h3"
)

// Clients under test.
const (
	// Replaysafe is replaysafe.Transport, configured for the scenario.
	Replaysafe = "replaysafe"
	// NetHTTP is a fresh net/http Transport speaking HTTP/1.1.
	NetHTTP = "net/http"
	// XNetHTTP2 is golang.org/x/net/http2's Transport: its RoundTrip, with
	// its own retry loop and backoff.
	XNetHTTP2 = "x/net/http2"
	// NetHTTPH2 is net/http's Transport speaking HTTP/2: ForceAttemptHTTP2
	// over TLS, unencrypted HTTP/2 (Protocols) for h2c.
	NetHTTPH2 = "net/http-h2"
	// QuicGoHTTP3 is quic-go's http3.Transport.
	QuicGoHTTP3 = "quic-go/http3"
)

// Network is what a case runs over and how its server closes
// connections.
type Network struct {
	// Name is the suffix of the case name.
	Name string
	// Proto is the protocol spoken over it.
	Proto string
	// TLS makes the server and client speak TLS (always for h3).
	TLS bool
	// Close is how an HTTP/1.1 server closes connections.
	Close replaysafetest.CloseMode
}

// Networks are every network, by protocol, in table order.
var Networks = []Network{
	{Name: "tcp", Proto: ProtoH1, Close: replaysafetest.CloseFIN},
	{Name: "tcp-rst", Proto: ProtoH1, Close: replaysafetest.CloseRST},
	{Name: "tls", Proto: ProtoH1, TLS: true, Close: replaysafetest.CloseFIN},
	{Name: "tls-abrupt", Proto: ProtoH1, TLS: true, Close: replaysafetest.CloseFINNoNotify},
	{Name: "h2", Proto: ProtoH2, TLS: true},
	{Name: "h2c", Proto: ProtoH2},
	{Name: "h3", Proto: ProtoH3, TLS: true},
}

// protoClients lists each protocol's clients in table order.
var protoClients = map[string][]string{
	ProtoH1: {Replaysafe, NetHTTP},
	ProtoH2: {Replaysafe, XNetHTTP2, NetHTTPH2},
	ProtoH3: {Replaysafe, QuicGoHTTP3},
}

func network(name string) (Network, bool) {
	i := slices.IndexFunc(Networks, func(n Network) bool { return n.Name == name })
	if i < 0 {
		return Network{}, false
	}
	return Networks[i], true
}

// Case is a scenario over one network.
type Case struct {
	// Scenario is the case's scenario.
	*Scenario
	// Network is the network it runs over.
	Network Network
}

// Name is "scenario-id/network".
func (c Case) Name() string { return c.ID + "/" + c.Network.Name }

// Expectation returns the case's expectation for client, and whether the
// file has one.
func (c Case) Expectation(client string) (Expectation, bool) {
	for _, e := range c.Expect {
		if e.Net == c.Network.Name && e.Client == client {
			return e, true
		}
	}
	return Expectation{Net: c.Network.Name, Client: client}, false
}

// Cases returns every case of the scenarios, in order.
func Cases(scenarios []*Scenario) []Case {
	var cs []Case
	for _, s := range scenarios {
		for _, name := range s.Nets {
			n, _ := network(name) // checked by Parse
			cs = append(cs, Case{Scenario: s, Network: n})
		}
	}
	return cs
}

//go:embed testdata/*.txt
var files embed.FS

// Scenarios reads the scenario files built into the command, in table
// order: HTTP/1.1, then the proxy rows, then HTTP/2, then HTTP/3, each in
// file-name order.
func Scenarios() ([]*Scenario, error) { return Load(files, "testdata") }

// Load reads every .txt file in dir of fsys as a Scenario.
func Load(fsys fs.FS, dir string) ([]*Scenario, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	var out []*Scenario
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		s, err := Parse(strings.TrimSuffix(path.Base(name), ".txt"), string(b))
		if err != nil {
			return nil, fmt.Errorf("conformance: %s: %w", name, err)
		}
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(a, b *Scenario) int { return order(a) - order(b) })
	return out, nil
}

// order ranks a scenario's group in the table.
func order(s *Scenario) int {
	switch {
	case s.Proto == ProtoH1 && s.Proxy == "":
		return 0
	case s.Proto == ProtoH1:
		return 1
	case s.Proto == ProtoH2:
		return 2
	}
	return 3
}

// Parse reads one scenario file.
func Parse(id, text string) (*Scenario, error) {
	s := &Scenario{ID: id}
	if id == "" || strings.ContainsAny(id, " /") {
		return nil, fmt.Errorf("bad scenario id %q", id)
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	var head strings.Builder
	inExpect := false
	for ln := 1; sc.Scan(); ln++ {
		line := sc.Text()
		if !inExpect {
			head.WriteString(line + "\n")
		}
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		var err error
		if inExpect {
			err = s.parseExpectation(f)
		} else if f[0] == "----" {
			inExpect = true
		} else {
			err = s.parseDirective(f[0], f[1:], strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), f[0])))
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", ln, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !inExpect {
		head.WriteString("----\n")
	}
	s.head = head.String()
	return s, s.check()
}

func (s *Scenario) parseDirective(key string, args []string, rest string) error {
	one := func() (string, error) {
		if len(args) != 1 {
			return "", fmt.Errorf("%s takes one argument", key)
		}
		return args[0], nil
	}
	var err error
	switch key {
	case "title":
		s.Title = rest
	case "proto":
		s.Proto, err = one()
	case "nets":
		s.Nets = args
	case "clients":
		s.Clients = args
	case "conn":
		s.Conns = append(s.Conns, args)
	case "default":
		s.Default, err = one()
	case "server":
		s.Server = append(s.Server, args...)
	case "proxy":
		s.Proxy, err = one()
	case "option":
		s.Options = append(s.Options, args...)
	case "step":
		if len(args) == 0 {
			return errors.New("step without a name")
		}
		s.Steps = append(s.Steps, args)
	case "peer-deadline":
		var v string
		if v, err = one(); err == nil {
			s.PeerDeadline, err = time.ParseDuration(v)
		}
	case "peer-runs":
		var v string
		if v, err = one(); err == nil {
			s.PeerRuns, err = strconv.Atoi(v)
		}
	default:
		return fmt.Errorf("unknown directive %q", key)
	}
	return err
}

func (s *Scenario) parseExpectation(f []string) error {
	if len(f) < 3 {
		return fmt.Errorf("expectation %q: want NET CLIENT OUTCOME and fields", strings.Join(f, " "))
	}
	e := Expectation{Net: f[0], Client: f[1]}
	switch f[2] {
	case "measured":
		if e.Client == Replaysafe {
			// A row nothing checks would hide a flaky copy count of
			// replaysafe's own: its runs must agree, and be checked.
			return fmt.Errorf("%s %s measured: replaysafe rows are checked, not measured", e.Net, e.Client)
		}
		e.Measured = true
	case "n/a":
		e.NA = true
	case "error":
	default:
		st, err := strconv.Atoi(f[2])
		if err != nil {
			return fmt.Errorf("outcome %q: want a status, error, measured or n/a", f[2])
		}
		e.Want.Status = st
	}
	for _, kv := range f[3:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "copies":
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("copies %q: %w", v, err)
			}
			e.Want.Copies = n
		case "rules":
			e.Want.Rules = v
		default:
			return fmt.Errorf("unknown expectation field %q", kv)
		}
	}
	s.Expect = append(s.Expect, e)
	return nil
}

// check validates the scenario and fills the defaults.
func (s *Scenario) check() error {
	clients, ok := protoClients[s.Proto]
	if !ok {
		return fmt.Errorf("proto %q: want h1, h2 or h3", s.Proto)
	}
	if s.Title == "" {
		return errors.New("no title")
	}
	if len(s.Steps) == 0 {
		return errors.New("no step")
	}
	if s.Nets == nil {
		for _, n := range Networks {
			if n.Proto == s.Proto {
				s.Nets = append(s.Nets, n.Name)
			}
		}
	}
	for _, name := range s.Nets {
		if n, ok := network(name); !ok || n.Proto != s.Proto {
			return fmt.Errorf("network %q is not one of %s", name, s.Proto)
		}
	}
	if s.Clients == nil {
		s.Clients = clients
	}
	for _, c := range s.Clients {
		if !slices.Contains(clients, c) {
			return fmt.Errorf("client %q does not speak %s", c, s.Proto)
		}
	}
	for _, e := range s.Expect {
		if !slices.Contains(s.Nets, e.Net) || !slices.Contains(s.Clients, e.Client) {
			return fmt.Errorf("expectation for %s %s, which the scenario does not run", e.Net, e.Client)
		}
	}
	for _, o := range s.Options {
		if _, ok := replaysafeOptions[o]; !ok {
			return fmt.Errorf("unknown option %q", o)
		}
	}
	if s.Proxy != "" && s.Proxy != "idle-cut" && s.Proxy != "auth" {
		return fmt.Errorf("unknown proxy %q", s.Proxy)
	}
	for _, st := range s.Steps {
		if _, ok := steps[st[0]]; !ok {
			return fmt.Errorf("unknown step %q", st[0])
		}
	}
	// Building every network's script checks the action names.
	for _, name := range s.Nets {
		n, _ := network(name)
		if _, err := s.serverConfig(n, make(chan struct{})); err != nil {
			return err
		}
	}
	return nil
}

// Format returns the file text with exps as its expectations: the
// directives as they were, then one line per network and client.
func (s *Scenario) Format(exps []Expectation) string {
	var b strings.Builder
	b.WriteString(s.head)
	wn, wc := 0, 0
	for _, e := range exps {
		wn, wc = max(wn, len(e.Net)), max(wc, len(e.Client))
	}
	for _, e := range exps {
		fmt.Fprintf(&b, "%-*s %-*s ", wn, e.Net, wc, e.Client)
		switch {
		case e.NA:
			b.WriteString("n/a")
		case e.Measured:
			b.WriteString("measured")
		default:
			b.WriteString(e.Want.String())
		}
		b.WriteString("\n")
	}
	return b.String()
}
