package replaysafe

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestIdleTimerLetsGoOfClosedConnections: a connection's idle timer holds
// it through an idleRef that closing empties. The runtime keeps a stopped
// timer until it next cleans its timer heap, and a timer that was not
// stopped until it fires; neither may keep a closed connection, with its
// buffers, reachable.
func TestIdleTimerLetsGoOfClosedConnections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	tr := New(Options{IdleConnTimeout: time.Hour})
	defer tr.CloseIdleConnections()

	resp, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL+"/", nil).WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	tr.pool.mu.Lock()
	var pc *persistConn
	for _, list := range tr.pool.idle {
		pc = list[0]
	}
	tr.pool.mu.Unlock()
	if pc == nil {
		t.Fatal("no idle connection after a clean exchange")
	}
	if pc.idleTimer == nil || pc.idleRef.get() != pc {
		t.Fatalf("idle connection: timer %v, its ref holds %v", pc.idleTimer, pc.idleRef.get())
	}
	tr.CloseIdleConnections()
	if got := pc.idleRef.get(); got != nil {
		t.Errorf("closed connection still held by its idle timer: %v", got)
	}
	if pc.idleTimer.Stop() {
		t.Error("closed connection's idle timer was still running")
	}
}

// TestMuxIdleTimerLetsGoOfShutConnections is the same for the HTTP/2 and
// HTTP/3 pool: shut stops the idle timer and empties its idleRef.
func TestMuxIdleTimerLetsGoOfShutConnections(t *testing.T) {
	p := newMuxPool[*fakeMuxConn](2, time.Hour, newConnLimit(0))
	c := &fakeMuxConn{}
	p.add(c)
	p.done(c, true) // idle: the timer starts
	m := c.mux()
	if m.idleTimer == nil || m.idleRef.get() != c {
		t.Fatalf("idle connection: timer %v, its ref holds %v", m.idleTimer, m.idleRef.get())
	}
	p.retire(c) // idle, so it is shut at once
	if !c.isClosed() {
		t.Fatal("a retired idle connection was not closed")
	}
	if got := m.idleRef.get(); got != nil {
		t.Errorf("shut connection still held by its idle timer: %v", got)
	}
	if m.idleTimer.Stop() {
		t.Error("shut connection's idle timer was still running")
	}
}

// fakeMuxConn is a muxConn that takes any number of streams.
type fakeMuxConn struct {
	state  muxState
	closed atomic.Bool // closed by the idle timer's goroutine
}

func (c *fakeMuxConn) mux() *muxState { return &c.state }
func (c *fakeMuxConn) reserve() bool  { return !c.closed.Load() }
func (c *fakeMuxConn) pending() bool  { return false }
func (c *fakeMuxConn) gone() bool     { return c.closed.Load() }
func (c *fakeMuxConn) close()         { c.closed.Store(true) }
func (c *fakeMuxConn) isClosed() bool { return c.closed.Load() }

// TestMuxIdleTimerClosesAfterLastAttempt: the idle timer is made when
// the connection first goes idle and made again by no later attempt. One
// that fires while an attempt runs does nothing, and the attempt's end
// sets it for a whole limit again. The connection closes exactly
// IdleConnTimeout after its last attempt ended, not after its first idle
// period began. Fake time (testing/synctest).
func TestMuxIdleTimerClosesAfterLastAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, c, start := idleMuxConn()
		timer := c.mux().idleTimer

		time.Sleep(900 * time.Millisecond)
		if got, _, _ := p.take(connKey{}, 0, nil); got != c {
			t.Fatalf("take at 0.9 s: %v", got)
		}
		time.Sleep(200 * time.Millisecond) // 1.1 s: the first idle period's limit passed while busy
		synctest.Wait()
		if c.isClosed() {
			t.Fatal("closed while an attempt ran on it")
		}
		p.done(c, true) // idle since 1.1 s: set for 2.1 s
		if c.mux().idleTimer != timer {
			t.Fatal("a new timer for a connection that has one")
		}
		expectIdleClose(t, c, start, []idleStep{
			{850 * time.Millisecond, false}, // 1.95 s
			{100 * time.Millisecond, false}, // 2.05 s
			{100 * time.Millisecond, true},  // 2.15 s: closed at 2.1 s
		})
		p.mu.Lock()
		n := len(p.conns[connKey{}])
		p.mu.Unlock()
		if n != 0 {
			t.Errorf("%d connections still pooled after the idle close", n)
		}
	})
}

// TestMuxIdleTimerSetForTheRest: attempts that start and end while the
// idle timer is set leave it alone (the pool does not reset it per
// attempt), so it fires when the connection has been idle for less than
// the limit, and is set for the rest. The connection closes exactly
// IdleConnTimeout after its last attempt ended. Fake time
// (testing/synctest).
func TestMuxIdleTimerSetForTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, c, start := idleMuxConn()
		for _, at := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond} {
			time.Sleep(at - time.Since(start))
			if got, _, _ := p.take(connKey{}, 0, nil); got != c {
				t.Fatalf("take at %v: %v", at, got)
			}
			time.Sleep(50 * time.Millisecond)
			p.done(c, true) // idle since 0.35 s, then 0.65 s
		}
		expectIdleClose(t, c, start, []idleStep{
			{400 * time.Millisecond, false}, // 1.05 s: the timer fired at 1 s and was set for 1.65 s
			{550 * time.Millisecond, false}, // 1.6 s
			{100 * time.Millisecond, true},  // 1.7 s: closed at 1.65 s
		})
	})
}

// idleMuxConn returns a pool with a 1 s idle limit holding one
// connection, whose attempt ended at start (now): its idle timer is set
// for 1 s.
func idleMuxConn() (*muxPool[*fakeMuxConn], *fakeMuxConn, time.Time) {
	p := newMuxPool[*fakeMuxConn](2, time.Second, newConnLimit(0))
	c := &fakeMuxConn{}
	p.add(c)
	start := time.Now()
	p.done(c, true)
	return p, c, start
}

// idleStep is a sleep, and whether the connection is closed after it.
type idleStep struct {
	sleep  time.Duration
	closed bool
}

// expectIdleClose sleeps each step in turn and checks whether c is
// closed after it; start is when c first went idle.
func expectIdleClose(t *testing.T, c *fakeMuxConn, start time.Time, steps []idleStep) {
	t.Helper()
	for _, step := range steps {
		time.Sleep(step.sleep)
		synctest.Wait()
		if got := c.isClosed(); got != step.closed {
			t.Fatalf("%v after the first idle: closed %v, want %v", time.Since(start), got, step.closed)
		}
	}
}

// TestIdleTimerRunsAcrossKeepAlive: over HTTP/1.1 a GET that takes the
// pooled connection stops its idle timer, and its return sets it for a
// whole limit again. Four GETs 600 ms apart under a 1 s limit share one
// connection, which closes 1 s after the last. Fake time
// (testing/synctest) over net.Pipe; the server counts connections and
// requests.
func TestIdleTimerRunsAcrossKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dials, requests, closed atomic.Int32
		serve := func(c net.Conn) {
			defer closed.Add(1)
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				requests.Add(1)
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
					return
				}
			}
		}
		tr := New(Options{IdleConnTimeout: time.Second, DialContext: func(context.Context, string, string) (net.Conn, error) {
			dials.Add(1)
			client, server := net.Pipe()
			go serve(server)
			return client, nil
		}})
		defer tr.CloseIdleConnections()
		get := func() {
			t.Helper()
			req, err := http.NewRequestWithContext(t.Context(), "GET", "http://pipe.test/", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != "ok" {
				t.Fatalf("body %q, %v", b, err)
			}
		}
		for i := range 4 {
			if i > 0 {
				time.Sleep(600 * time.Millisecond)
			}
			get()
		}
		synctest.Wait()
		if d, r := dials.Load(), requests.Load(); d != 1 || r != 4 {
			t.Fatalf("%d connections for %d requests, want 1 for 4", d, r)
		}
		time.Sleep(950 * time.Millisecond)
		synctest.Wait()
		if closed.Load() != 0 {
			t.Fatal("closed 950 ms after its last exchange, under a 1 s limit")
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if closed.Load() != 1 {
			t.Fatal("still open 1.05 s after its last exchange, under a 1 s limit")
		}
		if n := tr.IdleConns(); n != 0 {
			t.Errorf("%d idle connections after the idle close", n)
		}
	})
}

// TestDialTurnAfterAnotherDialEnded: an attempt whose take found the
// pool empty, and which reaches the dial gate only after another
// attempt's dial ended and added a connection, takes again instead of
// dialing a second one. A burst of 1,200 HTTP/2 GETs, at most 1,000 on
// a connection, opened a third connection in 8 of 20 runs under the race
// detector; none in 24 after this check.
// With nothing added, the first attempt at the gate dials and the next
// waits for it.
func TestDialTurnAfterAnotherDialEnded(t *testing.T) {
	p := newMuxPool[*fakeMuxConn](2, 0, newConnLimit(0))
	key := connKey{addr: "a:1"}
	seen := p.mark()
	if got, _, _ := p.take(key, 0, nil); got != nil {
		t.Fatal("took room in an empty pool")
	}
	p.add(&fakeMuxConn{state: muxState{key: key}}) // another attempt's dial ended
	if wait, lead := p.dialTurn(key, seen); wait != nil || lead != nil {
		t.Fatal("dial turn given after a connection joined the pool")
	}

	seen = p.mark()
	wait, lead := p.dialTurn(key, seen)
	if wait != nil || lead == nil {
		t.Fatal("first attempt at the gate does not dial")
	}
	wait2, lead2 := p.dialTurn(key, seen)
	if wait2 == nil || lead2 != nil {
		t.Fatal("second attempt at the gate does not wait")
	}
	lead()
	select {
	case <-wait2:
	default:
		t.Fatal("the dial's end does not wake the waiting attempt")
	}
}

// waitingMuxConn is a connection still waiting for what decides its
// room (an HTTP/2 server's SETTINGS that never come, or that say 0
// streams): it refuses every attempt but the first, as pending.
type waitingMuxConn struct {
	fakeMuxConn
	asked atomic.Int64 // reserve calls
}

func (c *waitingMuxConn) reserve() bool { c.asked.Add(1); return false }
func (c *waitingMuxConn) pending() bool { return true }

// TestPendingWaitBacksOff: an attempt waiting for a new connection's
// room looks again after 1 ms, then ever less often, up to every
// maxSettleWait: 4 times in its first 10 ms (a server's SETTINGS come
// within a round trip), but over a 2 s acquisition deadline about 130
// times, not 2,000 (each look takes the pool's lock). It never dials.
// Fake time (testing/synctest).
func TestPendingWaitBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newMuxPool[*waitingMuxConn](2, 0, newConnLimit(0))
		key := connKey{addr: "a:1"}
		c := &waitingMuxConn{fakeMuxConn: fakeMuxConn{state: muxState{key: key}}}
		p.add(c) // its first attempt runs
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		done := make(chan error)
		go func() {
			_, _, err := p.acquire(ctx, key, 0, nil, nil, func() (*waitingMuxConn, error) {
				t.Error("dialed while a connection was settling")
				return nil, errors.New("no dial")
			})
			done <- err
		}()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if n := c.asked.Load(); n != 4 {
			t.Errorf("asked %d times in the first 10 ms, want 4 (at 0, 1, 3 and 7 ms)", n)
		}
		if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("acquire ended with %v, want the 2 s deadline", err)
		}
		atCap := int64(2 * time.Second / maxSettleWait)
		if n := c.asked.Load(); n < atCap || n > atCap+8 {
			t.Errorf("asked %d times in 2 s, want %d to %d", n, atCap, atCap+8)
		}
	})
}
