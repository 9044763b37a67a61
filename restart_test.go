package replaysafe_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// restartFront is a TCP front for a test origin that can restart as a
// server process does: every connection through it dies at once with a
// TCP reset, and its port refuses connections until it listens again.
// Each connection it accepts gets one to the origin behind it, so the
// origin's receipts stay the record of what arrived.
type restartFront struct {
	origin string

	mu       sync.Mutex
	ln       net.Listener
	addr     string
	accepted int
	pairs    map[*frontPair]struct{}
	wg       sync.WaitGroup
}

type frontPair struct{ client, origin net.Conn }

func newRestartFront(t *testing.T, origin string) *restartFront {
	t.Helper()
	f := &restartFront{origin: origin, pairs: map[*frontPair]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.ln, f.addr = ln, ln.Addr().String()
	f.serve(ln)
	t.Cleanup(f.close)
	return f
}

// serve accepts on ln until it closes.
func (f *restartFront) serve(ln net.Listener) {
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o, err := net.Dial("tcp", f.origin)
			if err != nil {
				c.Close()
				continue
			}
			p := &frontPair{client: c, origin: o}
			f.mu.Lock()
			f.accepted++
			f.pairs[p] = struct{}{}
			f.mu.Unlock()
			f.wg.Go(func() { io.Copy(o, c); o.Close() })
			f.wg.Go(func() { io.Copy(c, o); c.Close() })
		}
	})
}

// Accepted returns the connections accepted so far.
func (f *restartFront) Accepted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accepted
}

// kill closes the listener and resets every connection: the port
// refuses from now on.
func (f *restartFront) kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ln.Close()
	for p := range f.pairs {
		if tc, ok := p.client.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST, not FIN: abrupt
		}
		p.client.Close()
		p.origin.Close()
		delete(f.pairs, p)
	}
}

// listen opens the port again.
func (f *restartFront) listen(t *testing.T) {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Errorf("listen again on %s: %v", f.addr, err)
		return
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	f.serve(ln)
}

func (f *restartFront) close() {
	f.kill()
	f.wg.Wait()
}

// TestRestartResendsShareOneRedial: a server restarts with 256 requests
// in flight on one reused HTTP/2 connection (192 GETs, 64 POSTs, none
// answered): every connection dies at once with a TCP reset and the port
// refuses for 100 ms. With default options the displaced GETs (RS20: a
// reused connection, idempotent, no response byte) wait for one shared
// redial, spaced while the port refuses, and then share the new
// connection: at most 4 new connections reach the server, every GET
// arrives exactly once more, byte for byte the same, and succeeds, and
// no POST arrives twice (spec/choices.md, choice 23).
func TestRestartResendsShareOneRedial(t *testing.T) {
	forTLSAndH2C(t, func(t *testing.T, useTLS bool) {
		const gets, posts = 192, 64
		hang := h2server.Hang(20 * time.Second)
		script := []h2server.Action{h2server.OK("ok")}
		for range gets + posts {
			script = append(script, hang)
		}
		cfg := h2Script(script)
		cfg.TLS = useTLS
		cfg.MaxConcurrentStreams = 1000 // all 256 on one connection
		s := startH2(t, cfg)
		front := newRestartFront(t, s.Addr())
		base := "http://" + front.addr
		if useTLS {
			base = "https://" + front.addr
		}
		var dials, refused atomic.Int64
		tr, _ := h2Client(t, s, replaysafe.Options{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				refused.Add(1)
			}
			return c, err
		}})
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()

		wait := inFlight(t, ctx, tr, base, gets, posts)
		if err := s.WaitRequests(ctx, 1+gets+posts); err != nil {
			t.Fatalf("the requests did not all arrive: %v", err)
		}
		if n := s.Accepted(); n != 1 {
			for c := range n {
				rs := s.RequestsOn(c)
				t.Logf("conn %d: %d streams, first %s", c, len(rs), rs[0].Path)
			}
			t.Fatalf("%d connections before the restart, want 1", n)
		}
		before := front.Accepted()
		front.kill()
		time.Sleep(100 * time.Millisecond) // the port refuses meanwhile
		front.listen(t)
		results := wait()

		newConns := front.Accepted() - before
		delivered, getsOK, postTwice, wrong := 0, 0, 0, 0
		for i := range gets {
			path := fmt.Sprintf("/g%d", i)
			cs := h2Copies(s, path)
			if len(cs) == 2 {
				delivered++
				a, b := cs[0], cs[1]
				if a.Method != b.Method || a.Path != b.Path || !reflect.DeepEqual(a.Header, b.Header) || !bytes.Equal(a.Body, b.Body) {
					t.Errorf("%s: copies differ: %+v, %+v", path, a.StreamRecord, b.StreamRecord)
				}
			} else if wrong++; wrong <= 3 {
				t.Errorf("%s arrived %d times, want 2", path, len(cs))
			}
			if r := results[i]; r.err == nil && r.code == 200 && r.body == "ok" {
				getsOK++
			} else if i < 3 {
				t.Logf("%s: %d %q %v", path, r.code, r.body, r.err)
			}
		}
		for i := range posts {
			if n := len(h2Copies(s, fmt.Sprintf("/p%d", i))); n > 1 {
				postTwice++
			}
			var e *replaysafe.Error
			if r := results[gets+i]; r.err == nil || !errors.As(r.err, &e) {
				t.Errorf("/p%d: %d %v, want a replaysafe error", i, r.code, r.err)
			}
		}
		t.Logf("after the restart: %d dials, %d failed; %d new connections; GETs delivered once more %d/%d, succeeded %d/%d; POSTs delivered twice %d/%d",
			dials.Load()-1, refused.Load(), newConns, delivered, gets, getsOK, gets, postTwice, posts)
		if newConns > 4 {
			t.Errorf("%d new connections after the restart, want ≤ 4", newConns)
		}
		if getsOK != gets {
			t.Errorf("%d of %d GETs succeeded", getsOK, gets)
		}
		if postTwice != 0 {
			t.Errorf("%d POSTs arrived twice", postTwice)
		}
	})
}

// TestRestartH3ResendsShareOneRedial: the restart of
// TestRestartResendsShareOneRedial over HTTP/3, with default options:
// 256 requests in flight on one reused QUIC connection (192 GETs, 64
// POSTs, none answered) when the server restarts on its address
// (h3server.Restart): every connection dies at once and the UDP port is
// closed for 100 ms.
//
// close: the server sends CONNECTION_CLOSE(H3_NO_ERROR) on its way down.
// The displaced GETs (RS20: a reused connection, idempotent, no response
// byte) wait for one shared redial, whose handshake gets through once
// the port is back, and share the new connection: at most 4 new
// connections, every GET arrives exactly once more, byte for byte the
// same, and succeeds, and no POST arrives twice.
//
// silent: the server dies without a packet and, back, sends no stateless
// reset. The client learns nothing until its QUIC idle timeout (a
// keep-alive PING after 1 s of silence, MaxIdleTimeout 4 s): every call
// then ends as a timeout (RS06, one attempt: the silence proves nothing
// about the request, spec/choices.md choice 11), none is resent, no new
// connection is dialed for them, and the next request finds the server.
func TestRestartH3ResendsShareOneRedial(t *testing.T) {
	for _, mode := range []h3server.KillMode{h3server.KillClose, h3server.KillSilent} {
		t.Run(mode.String(), func(t *testing.T) { testRestartH3(t, mode) })
	}
}

func testRestartH3(t *testing.T, mode h3server.KillMode) {
	const gets, posts = 192, 64
	hang := h3server.Hang(20 * time.Second)
	script := []h3server.Action{h3server.OK("ok")}
	for range gets + posts {
		script = append(script, hang)
	}
	cfg := h3Script(script)
	cfg.MaxIncomingStreams = 1000 // all 256 on one connection
	s := startH3(t, cfg)
	tr, obs := h3Client(t, s, replaysafe.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	wait := inFlight(t, ctx, tr, s.URL(), gets, posts)
	if _, err := s.WaitRequests(ctx, 1+gets+posts); err != nil {
		t.Fatalf("the requests did not all arrive: %v", err)
	}
	if n := s.Accepted(); n != 1 {
		t.Fatalf("%d connections before the restart, want 1", n)
	}
	killed := time.Now()
	if err := s.Restart(mode, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	results := wait()
	ended := time.Since(killed)
	newConns := s.Accepted() - 1

	copies := map[string][]h3server.Received{}
	for _, r := range s.Requests() {
		copies[r.Path] = append(copies[r.Path], r)
	}
	delivered, getsOK, timeouts, postTwice, wrong := 0, 0, 0, 0, 0
	for i := range gets {
		path := fmt.Sprintf("/g%d", i)
		cs := copies[path]
		if len(cs) == 2 {
			delivered++
			a, b := cs[0], cs[1]
			if a.Conn != 0 || b.Conn == 0 || a.Method != b.Method || !reflect.DeepEqual(a.Header, b.Header) || !bytes.Equal(a.Body, b.Body) {
				t.Errorf("%s: copies differ or run on the wrong connections: %+v, %+v", path, a.StreamRecord, b.StreamRecord)
			}
		}
		want := 2
		if mode == h3server.KillSilent {
			want = 1
		}
		if len(cs) != want {
			if wrong++; wrong <= 3 {
				t.Errorf("%s arrived %d times, want %d", path, len(cs), want)
			}
		}
		r := results[i]
		if r.err == nil && r.code == 200 && r.body == "ok" {
			getsOK++
		} else if mode == h3server.KillClose || i < 3 {
			t.Logf("%s: %d %q %v", path, r.code, r.body, r.err)
		}
		var e *replaysafe.Error
		if errors.As(r.err, &e) && e.Rule == fsm.RuleTimeout && e.Attempts == 1 {
			timeouts++
		}
	}
	for i := range posts {
		if n := len(copies[fmt.Sprintf("/p%d", i)]); n > 1 {
			postTwice++
		}
		var e *replaysafe.Error
		if r := results[gets+i]; r.err == nil || !errors.As(r.err, &e) {
			t.Errorf("/p%d: %d %v, want a replaysafe error", i, r.code, r.err)
		}
	}
	obs.mu.Lock()
	attempts := len(obs.attempts)
	obs.mu.Unlock()
	t.Logf("after the restart (%v; every call over %v after the kill): %d new connections; GETs delivered once more %d/%d, succeeded %d/%d, timed out (RS06, 1 attempt) %d/%d; POSTs delivered twice %d/%d; %d attempts observed",
		mode, ended.Round(time.Millisecond), newConns, delivered, gets, getsOK, gets, timeouts, gets, postTwice, posts, attempts)
	if postTwice != 0 {
		t.Errorf("%d POSTs arrived twice", postTwice)
	}
	switch mode {
	case h3server.KillClose:
		if newConns > 4 {
			t.Errorf("%d new connections after the restart, want ≤ 4", newConns)
		}
		if getsOK != gets {
			t.Errorf("%d of %d GETs succeeded", getsOK, gets)
		}
	case h3server.KillSilent:
		if newConns != 0 {
			t.Errorf("%d new connections for calls that are not resent, want 0", newConns)
		}
		if timeouts != gets {
			t.Errorf("%d of %d GETs failed as a timeout after one attempt", timeouts, gets)
		}
		// The server is back: the next request dials it.
		if code, body, err := roundTrip(tr, newRequest(t, ctx, "GET", s.URL()+"/next", "")); err != nil || code != 200 || body != "ok" {
			t.Errorf("a request after the idle timeout: %d %q %v", code, body, err)
		}
	}
}

// TestRestartNeverBackEndsAtAcquireTimeout: when the restarted server
// never listens again, a displaced GET waits for it only until its
// acquisition deadline: it fails then as a timeout (RS06, 2 attempts),
// the error names the route's last refused dial, and the redials were
// spaced (25 ms doubling: a handful in 500 ms, not one per millisecond).
func TestRestartNeverBackEndsAtAcquireTimeout(t *testing.T) {
	s := startH2(t, h2Script([]h2server.Action{h2server.OK("ok"), h2server.Hang(20 * time.Second)}))
	front := newRestartFront(t, s.Addr())
	var dials atomic.Int64
	tr, _ := h2Client(t, s, replaysafe.Options{AcquireTimeout: 500 * time.Millisecond,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}})
	base := "http://" + front.addr
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", base+"/warm", "")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", base+"/x", ""))
		done <- err
	}()
	if err := s.WaitRequests(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	front.kill() // and never listens again
	err := <-done
	var e *replaysafe.Error
	var te *replaysafe.TimeoutError
	if !errors.As(err, &e) || e.Rule != fsm.RuleTimeout || e.Attempts != 2 || !errors.As(err, &te) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("error %v, want RS06 after 2 attempts, a TimeoutError wrapping the refused dial", err)
	}
	redials := dials.Load() - 1
	t.Logf("%d redials in 500 ms: %v", redials, err)
	if redials < 2 || redials > 10 {
		t.Errorf("%d redials in 500 ms, want a few spaced ones", redials)
	}
}

// inFlight warms tr's connection to base with a GET, then sends gets GETs
// (/g0, /g1, ...) and posts POSTs (/p0, ... with the body "post N") at
// once; wait waits for every call and returns their outcomes, the GETs
// first.
func inFlight(t *testing.T, ctx context.Context, tr http.RoundTripper, base string, gets, posts int) (wait func() []inFlightResult) {
	t.Helper()
	if code, _, err := roundTrip(tr, newRequest(t, ctx, "GET", base+"/warm", "")); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	results := make([]inFlightResult, gets+posts)
	var wg sync.WaitGroup
	for i := range gets + posts {
		wg.Go(func() {
			var req *http.Request
			if i < gets {
				req = newRequest(t, ctx, "GET", fmt.Sprintf("%s/g%d", base, i), "")
			} else {
				req = newRequest(t, ctx, "POST", fmt.Sprintf("%s/p%d", base, i-gets), fmt.Sprintf("post %d", i-gets))
			}
			r := &results[i]
			r.code, r.body, r.err = roundTrip(tr, req)
		})
	}
	return func() []inFlightResult {
		wg.Wait()
		return results
	}
}

// inFlightResult is one call's outcome in inFlight.
type inFlightResult struct {
	code int
	body string
	err  error
}
