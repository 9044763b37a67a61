package conformance

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

// HTTP/2 peers under test beside replaysafe.
const (
	// XNetHTTP2 is golang.org/x/net/http2's Transport: its RoundTrip, with
	// its own retry loop and backoff.
	XNetHTTP2 = "x/net/http2"
	// NetHTTPH2 is net/http's Transport speaking HTTP/2: ForceAttemptHTTP2
	// over TLS, unencrypted HTTP/2 (Protocols) for h2c.
	NetHTTPH2 = "net/http-h2"
)

// H2Clients lists the clients of the HTTP/2 cases in table order.
var H2Clients = []string{Replaysafe, XNetHTTP2, NetHTTPH2}

// H2Network is what an HTTP/2 case runs over.
type H2Network struct {
	// Name is the suffix of the case name: h2 (TLS, ALPN) or h2c.
	Name string
	// TLS makes the server speak TLS with ALPN "h2"; otherwise h2c with
	// prior knowledge.
	TLS bool
}

// H2Networks are the networks every HTTP/2 scenario runs over.
var H2Networks = []H2Network{{Name: "h2", TLS: true}, {Name: "h2c"}}

// H2Scenario is one HTTP/2 fault, scripted frame by frame at an
// h2server and driven at the client.
type H2Scenario struct {
	// ID names the scenario in case names ("h2-post-refused").
	ID string
	// Title says what happens, in words.
	Title string
	// Config returns the server's scripts.
	Config func() h2server.Config
	// Run drives the client and returns the target request's result.
	Run func(env *StreamEnv) (Result, error)
	// Want is the expected outcome per client. A peer without an entry is
	// measured and shown, not checked.
	Want map[string]Want
	// PeerDeadline, when set, bounds each peer run's target request: for
	// peers whose own retry loop would otherwise sleep for a minute.
	// Their copies are then the copies sent within the window.
	PeerDeadline time.Duration
	// PeerRuns, when set, caps the runs of each peer.
	PeerRuns int
}

// H2Case is an HTTP/2 scenario over one network.
type H2Case struct {
	H2Scenario
	Network H2Network
}

// Name is "scenario-id/network".
func (c H2Case) Name() string { return c.ID + "/" + c.Network.Name }

// H2Cases returns every HTTP/2 scenario over every network.
func H2Cases() []H2Case {
	var cs []H2Case
	for _, s := range H2Scenarios() {
		for _, n := range H2Networks {
			cs = append(cs, H2Case{H2Scenario: s, Network: n})
		}
	}
	return cs
}

// conns scripts the first connections stream by stream; later ones
// answer 200.
func conns(scripts ...[]h2server.Action) func() h2server.Config {
	return func() h2server.Config {
		var cfg h2server.Config
		for _, s := range scripts {
			cfg.Conns = append(cfg.Conns, h2server.ConnScript{Streams: s})
		}
		return cfg
	}
}

// H2Scenarios returns the HTTP/2 fault scenarios, in table order.
func H2Scenarios() []H2Scenario {
	return []H2Scenario{
		{
			ID: "h2-post-refused", Title: "HTTP/2 POST refused (REFUSED_STREAM)",
			Config: conns([]h2server.Action{h2server.Refuse()}),
			Run:    targetStream(http.MethodPost, Buffered),
			Want: map[string]Want{
				Replaysafe: {ok200, "RS13,RS02", 2},
				XNetHTTP2:  {ok200, "", 2},
				NetHTTPH2:  {ok200, "", 2},
			},
		},
		{
			ID: "h2-oneshot-refused-after-body", Title: "HTTP/2 POST with a one-shot body refused after the body was sent",
			Config: conns([]h2server.Action{h2server.RefuseAfterBody()}),
			Run:    targetStream(http.MethodPost, OneShot),
			Want: map[string]Want{
				Replaysafe: {fails, "RS11", 1},
				XNetHTTP2:  {fails, "", 1},
				NetHTTPH2:  {fails, "", 1},
			},
		},
		{
			ID: "h2-post-goaway-below", Title: "HTTP/2 POST above a GOAWAY's last stream ID",
			Config: conns([]h2server.Action{h2server.OK("ok"), h2server.GoAwayBelow()}),
			Run:    warmThenStream(http.MethodPost, Buffered),
			Want: map[string]Want{
				Replaysafe: {ok200, "RS14,RS02", 2},
				XNetHTTP2:  {ok200, "", 2},
				NetHTTPH2:  {ok200, "", 2},
			},
		},
		{
			ID: "h2-post-goaway-at-close", Title: "HTTP/2 POST at a GOAWAY's last stream ID, then the connection closes",
			Config: conns([]h2server.Action{h2server.OK("ok"), h2server.GoAwayAt().WithClose(h2server.CloseFIN)}),
			Run:    warmThenStream(http.MethodPost, Buffered),
			Want: map[string]Want{
				Replaysafe: {fails, "RS18", 1},
				XNetHTTP2:  {fails, "", 1},
				NetHTTPH2:  {fails, "", 1},
			},
		},
		{
			ID: "h2-get-goaway-at-close", Title: "HTTP/2 GET at a GOAWAY's last stream ID, then the connection closes",
			Config: conns([]h2server.Action{h2server.OK("ok"), h2server.GoAwayAt().WithClose(h2server.CloseFIN)}),
			Run:    warmThenStream(http.MethodGet, NoBody),
			Want: map[string]Want{
				Replaysafe: {ok200, "RS20,RS02", 2},
				XNetHTTP2:  {fails, "", 1},
				NetHTTPH2:  {fails, "", 1},
			},
		},
		{
			ID: "h2-refuse-everything", Title: "HTTP/2 POST, the server refuses every stream (peers: copies within 2 s)",
			Config: func() h2server.Config { return h2server.Config{Default: h2server.Every(h2server.Refuse())} },
			Run:    targetStream(http.MethodPost, Buffered),
			Want: map[string]Want{
				Replaysafe: {fails, "RS13,RS08", 2},
				// x/net's loop: at once, then after 1 s, then after 2 s
				// more (past the window), and so on to 8 copies in 65 s.
				XNetHTTP2: {fails, "", 3},
				NetHTTPH2: {fails, "", 3},
			},
			PeerDeadline: 2 * time.Second,
			PeerRuns:     2,
		},
	}
}

// RunH2Once runs c once against client with a fresh server and client.
func RunH2Once(c H2Case, client string) (Run, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cfg := c.Config()
	cfg.TLS = c.Network.TLS
	srv, err := h2server.New(cfg)
	if err != nil {
		return Run{Setup: err}, 0
	}
	env := &StreamEnv{URL: srv.URL(), ctx: ctx}
	var rules targetRules
	var closeIdle func()
	switch client {
	case Replaysafe:
		tr := replaysafe.New(replaysafe.Options{
			Protocol:        replaysafe.ProtocolHTTP2,
			TLSClientConfig: srv.ClientTLSConfig(),
			Observer:        rules.observer(),
		})
		env.Client, closeIdle = tr, tr.CloseIdleConnections
	case XNetHTTP2:
		tr := &http2.Transport{TLSClientConfig: srv.ClientTLSConfig()}
		if !c.Network.TLS {
			tr.AllowHTTP = true
			tr.DialTLSContext = func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}
		}
		env.Client, closeIdle = tr, tr.CloseIdleConnections
		env.deadline = c.PeerDeadline
	case NetHTTPH2:
		tr := &http.Transport{TLSClientConfig: srv.ClientTLSConfig(), ForceAttemptHTTP2: true}
		if !c.Network.TLS {
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			tr.Protocols = &p
		}
		env.Client, closeIdle = tr, tr.CloseIdleConnections
		env.deadline = c.PeerDeadline
	default:
		srv.Close()
		return Run{Setup: fmt.Errorf("conformance: unknown HTTP/2 client %q", client)}, 0
	}

	res, setup := c.Run(env)
	receipts := func() []receipt {
		var got []receipt
		for _, q := range srv.Requests() {
			got = append(got, receipt{path: q.Path, method: q.Method, body: q.Body})
		}
		return got
	}
	return streamRun(res, setup, closeIdle, srv.Close, receipts, &rules), env.elapsed
}

// RunH2Case runs c n times against client (a peer at most PeerRuns
// times).
func RunH2Case(c H2Case, client string, n int) Report {
	want, checked := c.Want[client]
	return runStreamCase(c.Name(), c.Title, c.Network.Name, client, want, checked, c.PeerRuns, n,
		func() (Run, time.Duration) { return RunH2Once(c, client) })
}

// RunAllH2 runs every HTTP/2 case against every HTTP/2 client n times,
// several at once, and returns the reports in table order.
func RunAllH2(cases []H2Case, n int) []Report {
	var jobs []func() Report
	for _, c := range cases {
		for _, cl := range H2Clients {
			jobs = append(jobs, func() Report { return RunH2Case(c, cl, n) })
		}
	}
	return runJobs(jobs)
}
