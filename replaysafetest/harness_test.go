package replaysafetest

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kittest"
)

// ---- harness ----------------------------------------------------------

// live counts servers started by start and not yet closed by its cleanup;
// when it drops to zero no server goroutine may remain.
var live atomic.Int32

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if g := waitServerGoroutines(2 * time.Second); len(g) > 0 {
			fmt.Fprintf(os.Stderr, "leaked server goroutines:\n%s\n", strings.Join(g, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// serverGoroutines returns the stacks of goroutines running server code.
func serverGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "replaysafetest.(*Server).acceptLoop") || strings.Contains(g, "replaysafetest.(*conn).") {
			out = append(out, g)
		}
	}
	return out
}

// waitServerGoroutines polls briefly: a goroutine that called wg.Done may
// still be unwinding its last frame.
func waitServerGoroutines(d time.Duration) []string {
	end := time.Now().Add(d)
	for {
		g := serverGoroutines()
		if len(g) == 0 || time.Now().After(end) {
			return g
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// start starts a server that is closed, and checked for leaks, when the
// test ends.
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.Logf = t.Logf
	s, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	live.Add(1)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if live.Add(-1) == 0 {
			if g := waitServerGoroutines(time.Second); len(g) > 0 {
				t.Errorf("server goroutines left after Close:\n%s", strings.Join(g, "\n\n"))
			}
		}
	})
	return s
}

// ctxT bounds a wait of a test.
var ctxT = kittest.Context

// rawRecorder remembers every byte read from the TCP connection under a
// TLS client, so a test can see whether a close_notify arrived.
type rawRecorder struct {
	net.Conn
	got []byte
}

func (r *rawRecorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.got = append(r.got, p[:n]...)
	return n, err
}

// lastRecordIsCloseNotify reports whether the last TLS record received is
// an encrypted alert the size of a TLS 1.3 close_notify: 2 bytes of alert,
// 1 of content type and a 16-byte AEAD tag. Every other record the tests
// receive after the handshake (tickets, responses) is longer.
func (r *rawRecorder) lastRecordIsCloseNotify() bool {
	b, last := r.got, -1
	for len(b) >= 5 {
		n := int(b[3])<<8 | int(b[4])
		if len(b) < 5+n {
			return false
		}
		last = n
		b = b[5+n:]
	}
	return len(b) == 0 && last == 19
}

type client struct {
	t   *testing.T
	c   net.Conn
	tcp *net.TCPConn
	rec *rawRecorder // nil without TLS
}

func dial(t *testing.T, s *Server) *client {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	cl := &client{t: t, c: nc, tcp: nc.(*net.TCPConn)}
	if s.TLS() {
		cfg := s.ClientTLSConfig()
		cfg.MinVersion = tls.VersionTLS13
		cl.rec = &rawRecorder{Conn: nc}
		tc := tls.Client(cl.rec, cfg)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("handshake: %v", err)
		}
		tc.SetDeadline(time.Time{})
		if p := tc.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
			t.Fatalf("ALPN negotiated %q, want http/1.1", p)
		}
		cl.c = tc
	}
	return cl
}

func (cl *client) send(s string) {
	cl.t.Helper()
	cl.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(cl.c, s); err != nil {
		cl.t.Fatalf("write: %v", err)
	}
}

// expect reads exactly len(want) bytes and compares them with want.
func (cl *client) expect(want string) {
	cl.t.Helper()
	cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(want))
	n, err := io.ReadFull(cl.c, got)
	if err != nil || string(got) != want {
		cl.t.Fatalf("read %q, %v; want %q", got[:n], err, want)
	}
}

// readToEnd reads until an error and returns what it read and the error.
func (cl *client) readToEnd() ([]byte, error) {
	cl.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := cl.c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
}

// expectClose reads to the end and checks that nothing more arrived and
// that the close was the one mode produces.
func (cl *client) expectClose(mode CloseMode) {
	cl.t.Helper()
	got, err := cl.readToEnd()
	if len(got) != 0 {
		cl.t.Errorf("unexpected bytes before close: %q", got)
	}
	cl.checkCloseErr(mode, err)
}

func (cl *client) checkCloseErr(mode CloseMode, err error) {
	cl.t.Helper()
	switch mode {
	case CloseRST:
		if !kittest.IsReset(err) {
			cl.t.Errorf("read error %v, want ECONNRESET", err)
		}
	default:
		if err != io.EOF {
			cl.t.Errorf("read error %v, want io.EOF", err)
		}
		if cl.rec != nil {
			if got, want := cl.rec.lastRecordIsCloseNotify(), mode == CloseFIN; got != want {
				cl.t.Errorf("close_notify received = %v, want %v", got, want)
			}
		}
	}
}

var transports = []transport{{"tcp", false}, {"tls", true}}

// transport is one way of reaching the HTTP/1.1 origin.
type transport = struct {
	name string
	tls  bool
}

// forTransports runs f as a subtest per transport (TCP, TLS).
func forTransports(t *testing.T, f func(t *testing.T, tr transport)) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { f(t, tr) })
	}
}

// startDial starts a server with cfg and dials it once.
func startDial(t *testing.T, cfg Config) (*Server, *client) {
	t.Helper()
	s := start(t, cfg)
	return s, dial(t, s)
}

func modesFor(tlsOn bool) []CloseMode {
	if tlsOn {
		return []CloseMode{CloseFIN, CloseFINNoNotify, CloseRST}
	}
	return []CloseMode{CloseFIN, CloseRST}
}

func forEachTransportAndMode(t *testing.T, f func(t *testing.T, tlsOn bool, mode CloseMode)) {
	for _, tr := range transports {
		for _, mode := range modesFor(tr.tls) {
			t.Run(tr.name+"/"+mode.String(), func(t *testing.T) { f(t, tr.tls, mode) })
		}
	}
}

// checkRecorded compares the complete requests with want: raw bytes, and
// connection and sequence indices in order.
func checkRecorded(t *testing.T, s *Server, want ...Received) {
	t.Helper()
	got := s.Requests()
	if len(got) != len(want) {
		t.Fatalf("recorded %d requests, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Conn != w.Conn || g.Seq != w.Seq || !bytes.Equal(g.Raw, w.Raw) || g.Partial {
			t.Errorf("request %d = conn %d seq %d partial %v raw %q; want conn %d seq %d raw %q",
				i, g.Conn, g.Seq, g.Partial, g.Raw, w.Conn, w.Seq, w.Raw)
		}
	}
	if p := s.Partial(); len(p) != 0 {
		t.Errorf("unexpected partial requests: %+v", p)
	}
}

func rec(conn, seq int, raw string) Received { return Received{Conn: conn, Seq: seq, Raw: []byte(raw)} }

const (
	getA   = "GET /a HTTP/1.1\r\nHost: example.test\r\nUser-Agent: t\r\n\r\n"
	getB   = "GET /b HTTP/1.1\r\nHost: example.test\r\n\r\n"
	postB  = "POST /b HTTP/1.1\r\nHost: example.test\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello"
	respOK = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
)
