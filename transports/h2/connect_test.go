package h2_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// tunnelServer is an HTTP/2 CONNECT endpoint (RFC 9113 §8.5) on a
// net/http server: it answers each CONNECT as script says and, on 2xx,
// echoes what the tunnel carries, upper-cased, until the client ends its
// half. It counts CONNECTs and the distinct connections they came on.
type tunnelServer struct {
	connects atomic.Int64
	mu       sync.Mutex
	targets  []string
	conns    map[string]bool
}

func (s *tunnelServer) handler(script func(r *http.Request, w http.ResponseWriter) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		s.connects.Add(1)
		s.mu.Lock()
		s.targets = append(s.targets, r.Host)
		if s.conns == nil {
			s.conns = map[string]bool{}
		}
		s.conns[r.RemoteAddr] = true
		s.mu.Unlock()
		if script != nil && !script(r, w) {
			return
		}
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		rc.Flush()
		buf := make([]byte, 4<<10)
		for { // each pass echoes one read
			n, err := r.Body.Read(buf)
			if n > 0 {
				w.Write([]byte(strings.ToUpper(string(buf[:n]))))
				rc.Flush()
			}
			if err != nil {
				return
			}
		}
	})
}

func (s *tunnelServer) connCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func openTunnel(t *testing.T, cc *h2.ClientConn, ctx context.Context, target string) (*h2.TunnelConn, *http.Response, error) {
	t.Helper()
	if !cc.Reserve() {
		t.Fatalf("Reserve failed: %+v", cc.State())
	}
	return cc.Tunnel(ctx, target, http.Header{"Proxy-Authorization": {"Basic dGVzdDp0ZXN0"}})
}

// TestTunnelStreamsShareConnection: RFC 9113 §8.5, several tunnels are
// streams of one connection; each carries its own bytes both ways, and
// CloseWrite ends the upstream so that the server's half ends too.
func TestTunnelStreamsShareConnection(t *testing.T) {
	var s tunnelServer
	o := newOrigin(t, false, s.handler(nil))
	cc := o.conn(t, h2.Config{})
	const n = 5
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			target := "origin-" + string(rune('a'+i)) + ".test:443"
			tc, res, err := openTunnel(t, cc, t.Context(), target)
			if err != nil || tc == nil {
				errs <- errors.Join(errors.New("tunnel "+target), err)
				return
			}
			defer tc.Close()
			if res.StatusCode != 200 || tc.RemoteAddr().String() != target {
				errs <- errors.New("unexpected answer " + res.Status + " for " + tc.RemoteAddr().String())
				return
			}
			msg := "hello through " + target
			if _, err := tc.Write([]byte(msg)); err != nil {
				errs <- err
				return
			}
			tc.CloseWrite()
			got, err := io.ReadAll(tc)
			if err != nil || string(got) != strings.ToUpper(msg) {
				errs <- errors.New("read " + string(got) + ": " + errString(err))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := s.connects.Load(); got != n {
		t.Errorf("server saw %d CONNECTs, want %d", got, n)
	}
	if got := s.connCount(); got != 1 {
		t.Errorf("CONNECTs came on %d connections, want 1", got)
	}
	s.mu.Lock()
	for _, tg := range s.targets {
		if !strings.HasPrefix(tg, "origin-") || !strings.HasSuffix(tg, ".test:443") {
			t.Errorf("server saw :authority %q", tg)
		}
	}
	s.mu.Unlock()
}

// TestTunnelRefused: a status outside 2xx opens no tunnel; the response
// is returned and the error is nil.
func TestTunnelRefused(t *testing.T) {
	var s tunnelServer
	o := newOrigin(t, false, s.handler(func(r *http.Request, w http.ResponseWriter) bool {
		w.Header().Set("Proxy-Authenticate", `Basic realm="x"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
		return false
	}))
	cc := o.conn(t, h2.Config{})
	tc, res, err := openTunnel(t, cc, t.Context(), "o.test:443")
	if tc != nil || err != nil || res == nil || res.StatusCode != http.StatusProxyAuthRequired || res.Header.Get("Proxy-Authenticate") == "" {
		t.Fatalf("Tunnel = %v, %v, %v; want nil, 407 with a challenge, nil", tc, res, err)
	}
	if got := s.connects.Load(); got != 1 {
		t.Errorf("server saw %d CONNECTs, want 1", got)
	}
	if st := cc.State(); st.ActiveStreams != 0 || st.Closed {
		t.Errorf("connection after a refusal: %+v", st)
	}
}

// TestTunnelResetIsConnectionReset: a stream reset after the 2xx reaches
// the tunnel's reader as a *h2.TunnelError matching syscall.ECONNRESET,
// as a reset TCP connection would; the HTTP/2 connection goes on.
func TestTunnelResetIsConnectionReset(t *testing.T) {
	var s tunnelServer
	o := newOrigin(t, false, s.handler(func(r *http.Request, w http.ResponseWriter) bool {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		io.ReadFull(r.Body, make([]byte, 4))
		panic(http.ErrAbortHandler) // RST_STREAM
	}))
	cc := o.conn(t, h2.Config{})
	tc, _, err := openTunnel(t, cc, t.Context(), "o.test:443")
	if err != nil || tc == nil {
		t.Fatalf("Tunnel: %v", err)
	}
	defer tc.Close()
	if _, err := tc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_, err = tc.Read(make([]byte, 10))
	var te *h2.TunnelError
	if !errors.As(err, &te) || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read after reset = %v; want a *TunnelError matching ECONNRESET", err)
	}
	var se *h2.StreamError
	if !errors.As(err, &se) {
		t.Errorf("cause %v; want the *StreamError", err)
	}
	<-tc.Done()
	if _, err := tc.Write([]byte("more")); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Write after reset = %v; want ECONNRESET", err)
	}
	tc2, _, err := openTunnel(t, cc, t.Context(), "o.test:443")
	if err != nil {
		t.Fatalf("second tunnel on the same connection: %v", err)
	}
	tc2.Close()
	if got := s.connects.Load(); got != 2 {
		t.Errorf("server saw %d CONNECTs, want 2", got)
	}
}

// TestTunnelDeadlines: a passed read or write deadline fails at once
// with os.ErrDeadlineExceeded (a net.Error timeout); cleared, the
// tunnel works again.
func TestTunnelDeadlines(t *testing.T) {
	var s tunnelServer
	o := newOrigin(t, false, s.handler(nil))
	cc := o.conn(t, h2.Config{})
	tc, _, err := openTunnel(t, cc, t.Context(), "o.test:443")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.SetReadDeadline(time.Unix(1, 0))
	_, err = tc.Read(make([]byte, 1))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past the deadline = %v", err)
	}
	// A blocked Read is released by a deadline set meanwhile.
	done := make(chan error, 1)
	tc.SetReadDeadline(time.Time{})
	go func() {
		_, err := tc.Read(make([]byte, 1))
		done <- err
	}()
	tc.SetReadDeadline(time.Unix(1, 0))
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blocked Read after SetReadDeadline = %v", err)
	}
	tc.SetDeadline(time.Time{})
	if _, err := tc.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	if _, err := io.ReadFull(tc, got); err != nil || string(got) != "ABC" {
		t.Fatalf("echo after clearing deadlines = %q, %v", got, err)
	}
}

// TestTunnelContextEndsBeforeAnswer: the context bounds the wait for the
// answer only; ended first, it fails Tunnel and resets the stream.
func TestTunnelContextEndsBeforeAnswer(t *testing.T) {
	var s tunnelServer
	arrived, released := make(chan struct{}), make(chan struct{})
	o := newOrigin(t, false, s.handler(func(r *http.Request, w http.ResponseWriter) bool {
		close(arrived)
		<-r.Context().Done() // the client's reset
		close(released)
		return false
	}))
	cc := o.conn(t, h2.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-arrived
		cancel()
	}()
	tc, res, err := openTunnel(t, cc, ctx, "o.test:443")
	if tc != nil || res != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Tunnel = %v, %v, %v; want context.Canceled", tc, res, err)
	}
	<-released
	if got := s.connects.Load(); got != 1 {
		t.Errorf("server saw %d CONNECTs, want 1", got)
	}
}

// RFC 9113 §8.5: until the 2xx no tunnel exists. A refusal, a reset, a
// GOAWAY or the connection's end before it fails Tunnel with the
// stream's or the connection's error and no tunnel, as the proxy dialer
// needs to call it an acquisition failure (nothing reached the target).
func TestTunnelFailsBeforeAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action h2server.Action
		check  func(error) bool
	}{
		{"refused", h2server.Refuse(), func(err error) bool {
			var se *h2.StreamError
			return errors.As(err, &se) && se.Unprocessed()
		}},
		{"connect-error", h2server.Reset(http2.ErrCodeConnect).WithAt(h2server.OnHeaders), func(err error) bool {
			var se *h2.StreamError
			return errors.As(err, &se) && se.Code == http2.ErrCodeConnect
		}},
		{"goaway-below", h2server.GoAwayBelow().WithClose(h2server.CloseFIN), func(err error) bool {
			var ge *h2.GoAwayError
			return errors.As(err, &ge) && ge.Unprocessed()
		}},
		{"conn-closed", h2server.CloseConn(), func(err error) bool { return err != nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := scripted(t, false, h2server.Config{Default: h2server.Every(tc.action)})
			cc := connTo(t, dialScripted(t, s))
			tun, res, err := openTunnel(t, cc, t.Context(), "o.test:443")
			if tun != nil || res != nil || !tc.check(err) {
				t.Fatalf("Tunnel = %v, %v, %v (%T)", tun, res, err, err)
			}
			waitRequests(t, s, 1)
			if got := s.Requests(); len(got) != 1 || got[0].Method != http.MethodConnect || got[0].Authority != "o.test:443" || got[0].Path != "" || got[0].Scheme != "" {
				t.Errorf("server recorded %+v; want the one CONNECT", got)
			}
		})
	}
}

// A tunnel carries more than its buffers and the stream windows hold,
// both ways at once: 1 MiB up, echoed back, every byte in order.
func TestTunnelLargeTransfer(t *testing.T) {
	var s tunnelServer
	o := newOrigin(t, false, s.handler(nil))
	cc := o.conn(t, h2.Config{StreamWindow: h2.MinWindow})
	tc, _, err := openTunnel(t, cc, t.Context(), "o.test:443")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	const size = 1 << 20
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = 'a' + byte(i%26)
	}
	werr := make(chan error, 1)
	go func() {
		for p := msg; len(p) > 0; { // odd-sized writes
			n := min(len(p), 7777)
			if _, err := tc.Write(p[:n]); err != nil {
				werr <- err
				return
			}
			p = p[n:]
		}
		werr <- tc.CloseWrite()
	}()
	got, err := io.ReadAll(tc)
	if err != nil || len(got) != size {
		t.Fatalf("read %d bytes, %v; want %d", len(got), err, size)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != 'A'+byte(i%26) {
			t.Fatalf("byte %d = %q", i, got[i])
		}
	}
}
