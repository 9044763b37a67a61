//lint:file-ignore SA1019 the peer runs are x/net/http2's own Transport, which the soak compares replaysafe with; net/http's bundled copy would hide which client dialed.

package soak

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/internal/harness/tracecheck"
)

// client is the Transport under soak with its counters.
type client struct {
	name      string
	rt        http.RoundTripper
	dialCount *dialStats // nil: no dial hook
	// checker checks every attempt (replaysafe only); drop lets the
	// soak release it, and the requests it remembers, before measuring
	// the heap at the end.
	checker   atomic.Pointer[tracecheck.Checker]
	attempts  atomic.Int64
	idle      func() int
	closeIdle func()
	close     func()
}

func (c *client) dials() int {
	if c.dialCount == nil {
		return -1
	}
	return int(c.dialCount.dials.Load())
}

// peakOpen returns the most dialed connections open at once, or -1.
func (c *client) peakOpen() int {
	if c.dialCount == nil {
		return -1
	}
	return int(c.dialCount.peak.Load())
}

// traces returns the traces checked, the attempts observed and
// tracecheck's verdict.
func (c *client) traces() (checked, attempts int, err error) {
	ch := c.checker.Load()
	if ch == nil {
		return 0, int(c.attempts.Load()), nil
	}
	return ch.Checked(), int(c.attempts.Load()), ch.Err()
}

// dropChecker releases the checker; later attempts go unchecked.
func (c *client) dropChecker() { c.checker.Store(nil) }

// dialStats counts the connections a client dialed, those open now and
// the most open at once.
type dialStats struct {
	dials, open, peak atomic.Int64
}

// countedConn is a dialed connection that leaves the open count when
// first closed.
type countedConn struct {
	net.Conn
	st   *dialStats
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.st.open.Add(-1) })
	return c.Conn.Close()
}

func countingDialer(st *dialStats) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		st.dials.Add(1)
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		open := st.open.Add(1)
		for {
			p := st.peak.Load()
			if open <= p || st.peak.CompareAndSwap(p, open) {
				break
			}
		}
		return &countedConn{Conn: c, st: st}, nil
	}
}

func newClient(cfg Config, srv *server) (*client, error) {
	var tlsConf *tls.Config
	if srv.roots != nil {
		tlsConf = &tls.Config{RootCAs: srv.roots}
	}
	if cfg.Peer {
		return newPeer(cfg, tlsConf)
	}
	c := &client{name: "replaysafe", dialCount: new(dialStats)}
	c.checker.Store(&tracecheck.Checker{})
	o := replaysafe.Options{
		DialContext:     countingDialer(c.dialCount),
		TLSClientConfig: tlsConf,
		Observer: replaysafe.Observer{OnAttempt: func(r replaysafe.AttemptReport) {
			c.attempts.Add(1)
			if ch := c.checker.Load(); ch != nil {
				ch.Observe(r)
			}
		}},
	}
	o.Retry.MaxAttempts = cfg.Retry
	o.Retry.MaxRetryAfter = cfg.RetryAfterMax
	switch cfg.Proto {
	case "h1", "h1tls":
		o.Protocol = replaysafe.ProtocolHTTP1
	case "h2", "h2c":
		o.Protocol = replaysafe.ProtocolHTTP2
	case "h3":
		o.Protocol = replaysafe.ProtocolHTTP3
		c.dialCount = nil // QUIC does not dial through DialContext
	}
	o.MaxConnsPerHost = max(cfg.MaxConns, 0)
	t := replaysafe.New(o)
	c.rt = t
	c.idle = t.IdleConns
	c.closeIdle = t.CloseIdleConnections
	c.close = t.CloseIdleConnections
	return c, nil
}

// newPeer returns the reference client for cfg.Proto.
func newPeer(cfg Config, tlsConf *tls.Config) (*client, error) {
	n := new(dialStats)
	c := &client{dialCount: n, idle: func() int { return -1 }}
	dial := countingDialer(n)
	switch cfg.Proto {
	case "h1", "h1tls":
		t := &http.Transport{
			DialContext:     dial,
			TLSClientConfig: tlsConf,
			MaxConnsPerHost: cfg.MaxConns,
			IdleConnTimeout: 90 * time.Second,
			// A non-nil empty map switches HTTP/2 off.
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
		}
		c.name, c.rt, c.closeIdle, c.close = "net/http", t, t.CloseIdleConnections, t.CloseIdleConnections
	case "h2":
		t := &http2.Transport{
			TLSClientConfig: tlsConf,
			DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
				raw, err := dial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				tc := tls.Client(raw, cfg)
				if err := tc.HandshakeContext(ctx); err != nil {
					raw.Close()
					return nil, err
				}
				return tc, nil
			},
		}
		c.name, c.rt, c.closeIdle, c.close = "x/net/http2", t, t.CloseIdleConnections, t.CloseIdleConnections
	case "h2c":
		t := &http2.Transport{
			AllowHTTP: true,
			DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				return dial(ctx, network, addr)
			},
		}
		c.name, c.rt, c.closeIdle, c.close = "x/net/http2", t, t.CloseIdleConnections, t.CloseIdleConnections
	case "h3":
		t := &http3.Transport{
			TLSClientConfig: tlsConf,
			QUICConfig:      &quic.Config{KeepAlivePeriod: 30 * time.Second},
		}
		c.dialCount = nil
		// quic-go keeps its UDP socket and its goroutines until Close,
		// which the settle wait therefore calls too.
		closeAll := func() { t.CloseIdleConnections(); _ = t.Close() }
		c.name, c.rt, c.closeIdle, c.close = "quic-go/http3", t, closeAll, closeAll
	default:
		return nil, fmt.Errorf("soak: unknown protocol %q", cfg.Proto)
	}
	return c, nil
}

// request returns request i's method and body, drawn from the seed.
func request(seed uint64, i int64) (string, []byte) {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	m := Methods[r.IntN(len(Methods))]
	if m == http.MethodGet || m == http.MethodDelete {
		return m, nil
	}
	b := make([]byte, r.IntN(8<<10))
	for j := range b {
		b[j] = byte('a' + r.IntN(26))
	}
	return m, b
}

// callResult is how one call ended at the client.
type callResult struct {
	method string
	// ok: 200 with the digest of the body sent.
	ok bool
	// status is the status of a response read whole, 0 without one.
	status int
	// err is the error of the call or of its body read.
	err error
	// class names the failure: the rule and its cause, or the status.
	class string
	// forceClosed: the error mentions "force closed".
	forceClosed bool
}

// call makes request i and reports how it ended.
func call(ctx context.Context, rt http.RoundTripper, base string, cfg Config, i int64) callResult {
	method, body := request(cfg.Seed, i)
	res := callResult{method: method}
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	id := strconv.FormatInt(i, 10)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body) // NewRequest sets GetBody for it
	}
	req, err := http.NewRequestWithContext(ctx, method, base+"/soak/"+id, rd)
	if err != nil {
		res.err, res.class = err, "request: "+err.Error()
		return res
	}
	req.Header.Set(IDHeader, id)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		res.err, res.class, res.forceClosed = err, classify(err), strings.Contains(err.Error(), "force closed")
		return res
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		res.err, res.class, res.forceClosed = err, "body: "+classify(err), strings.Contains(err.Error(), "force closed")
		return res
	}
	res.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		res.class = "status " + strconv.Itoa(resp.StatusCode)
		return res
	}
	sum := sha256.Sum256(body)
	if string(got) != hex.EncodeToString(sum[:]) {
		res.class = "wrong response body"
		return res
	}
	res.ok = true
	return res
}

// ruleOf returns the rule ID of a *replaysafe.Error in err's chain, or
// "".
func ruleOf(err error) string {
	var re *replaysafe.Error
	if errors.As(err, &re) {
		return re.Rule.ID()
	}
	return ""
}

// noise is what splits one error class into many: addresses and ports,
// stream numbers (single digits included), connection and frame counters
// and pointers. A rule ID (RS17) and a status word stay.
var noise = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\[[0-9a-fA-F:.]*\](:\d+)?`), "ADDR"},
	{regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}(:\d+)?`), "ADDR"},
	{regexp.MustCompile(`(?i)\b(stream(?:[ _]?id)?|streamid)([ =:#]*)\d+`), "${1}${2}N"},
	{regexp.MustCompile(`0x[0-9a-fA-F]+`), "N"},
	{regexp.MustCompile(`(^|[^A-Za-z0-9/])\d{2,}\b`), "${1}N"},
}

// classify names an error's class: the rule of a *replaysafe.Error and
// its cause, or a short description with addresses and numbers blanked.
func classify(err error) string {
	var re *replaysafe.Error
	if errors.As(err, &re) {
		return fmt.Sprintf("%s %s: %s", re.Rule.ID(), re.Rule, shortCause(re.Err))
	}
	return shortCause(err)
}

func shortCause(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, syscall.EMFILE):
		return "too many open files"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded: " + trim(err.Error())
	}
	return trim(err.Error())
}

func trim(s string) string {
	for _, n := range noise {
		s = n.re.ReplaceAllString(s, n.with)
	}
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}
