package pool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestMuxIdleTimerLetsGoOfShutConnections is the same for the HTTP/2 and
// HTTP/3 pool: shut stops the idle timer and empties its idleRef.
func TestMuxIdleTimerLetsGoOfShutConnections(t *testing.T) {
	p := NewMux[*fakeMuxConn](2, time.Hour, NewLimit(0), nil)
	c := &fakeMuxConn{}
	p.add(c, p.Tick())
	p.Done(c, true) // idle: the timer starts
	m := c.Mux()
	if m.idleRef == nil || m.idleRef.get() != c {
		t.Fatalf("idle connection: timer %v, its ref holds %v", m.idleRef, m.idleRef.get())
	}
	p.Retire(c) // idle, so it is shut at once
	if !c.isClosed() {
		t.Fatal("a retired idle connection was not closed")
	}
	if got := m.idleRef.get(); got != nil {
		t.Errorf("shut connection still held by its idle timer: %v", got)
	}
	if m.idleRef.timer.Stop() {
		t.Error("shut connection's idle timer was still running")
	}
}

// fakeMuxConn is a MuxConn that takes any number of streams.
type fakeMuxConn struct {
	state  MuxState
	closed atomic.Bool // closed by the idle timer's goroutine
	readAt time.Time   // the last frame read from the peer, for ReadSince
}

func (c *fakeMuxConn) Mux() *MuxState { return &c.state }
func (c *fakeMuxConn) Reserve() bool  { return !c.closed.Load() }
func (c *fakeMuxConn) Pending() bool  { return false }
func (c *fakeMuxConn) Gone() bool     { return c.closed.Load() }
func (c *fakeMuxConn) Close(closed func()) {
	c.closed.Store(true)
	if closed != nil {
		closed()
	}
}

// ReadSince reports whether the connection's test set readAt after t.
func (c *fakeMuxConn) ReadSince(t time.Time) bool { return c.readAt.After(t) }
func (c *fakeMuxConn) isClosed() bool             { return c.closed.Load() }

// TestMuxIdleTimerClosesAfterLastAttempt: the idle timer is made when
// the connection first goes idle and made again by no later attempt. One
// that fires while an attempt runs does nothing, and the attempt's end
// sets it for a whole limit again. The connection closes exactly
// IdleConnTimeout after its last attempt ended, not after its first idle
// period began. Fake time (testing/synctest).
func TestMuxIdleTimerClosesAfterLastAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, c, start := idleMuxConn()
		timer := c.Mux().idleRef.timer

		time.Sleep(900 * time.Millisecond)
		if got, _, _ := p.Take(Key{}, 0, nil, false); got != c {
			t.Fatalf("take at 0.9 s: %v", got)
		}
		time.Sleep(200 * time.Millisecond) // 1.1 s: the first idle period's limit passed while busy
		synctest.Wait()
		if c.isClosed() {
			t.Fatal("closed while an attempt ran on it")
		}
		p.Done(c, true) // idle since 1.1 s: set for 2.1 s
		if c.Mux().idleRef.timer != timer {
			t.Fatal("a new timer for a connection that has one")
		}
		expectIdleClose(t, c, start, []idleStep{
			{850 * time.Millisecond, false}, // 1.95 s
			{100 * time.Millisecond, false}, // 2.05 s
			{100 * time.Millisecond, true},  // 2.15 s: closed at 2.1 s
		})
		p.mu.Lock()
		n := len(p.conns[Key{}])
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
			if got, _, _ := p.Take(Key{}, 0, nil, false); got != c {
				t.Fatalf("take at %v: %v", at, got)
			}
			time.Sleep(50 * time.Millisecond)
			p.Done(c, true) // idle since 0.35 s, then 0.65 s
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
func idleMuxConn() (*Mux[*fakeMuxConn], *fakeMuxConn, time.Time) {
	p := NewMux[*fakeMuxConn](2, time.Second, NewLimit(0), nil)
	c := &fakeMuxConn{}
	p.add(c, p.Tick())
	start := time.Now()
	p.Done(c, true)
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

// TestDialTurnAfterAnotherDialEnded: an attempt whose take found the
// pool empty, and which reaches the dial gate only after another
// attempt's dial ended and added a connection, takes again instead of
// dialing a second one. A burst of 1,200 HTTP/2 GETs, at most 1,000 on
// a connection, opened a third connection in 8 of 20 runs under the race
// detector; none in 24 after this check.
// With nothing added, the first attempt at the gate dials and the next
// waits for it.
func TestDialTurnAfterAnotherDialEnded(t *testing.T) {
	p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
	key := Key{Addr: "a:1"}
	seen := p.Mark()
	if got, _, _ := p.Take(key, 0, nil, false); got != nil {
		t.Fatal("took room in an empty pool")
	}
	p.add(&fakeMuxConn{state: MuxState{Key: key}}, p.Tick()) // another attempt's dial ended
	if wait, lead := p.dialTurn(key, seen); wait != nil || lead != nil {
		t.Fatal("dial turn given after a connection joined the pool")
	}

	seen = p.Mark()
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

func (c *waitingMuxConn) Reserve() bool { c.asked.Add(1); return false }
func (c *waitingMuxConn) Pending() bool { return true }

// TestPendingWaitBacksOff: an attempt waiting for a new connection's
// room looks again after 1 ms, then ever less often, up to every
// maxSettleWait: 4 times in its first 10 ms (a server's SETTINGS come
// within a round trip), but over a 2 s acquisition deadline about 130
// times, not 2,000 (each look takes the pool's lock). It never dials.
// Fake time (testing/synctest).
func TestPendingWaitBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewMux[*waitingMuxConn](2, 0, NewLimit(0), nil)
		key := Key{Addr: "a:1"}
		c := &waitingMuxConn{fakeMuxConn: fakeMuxConn{state: MuxState{Key: key}}}
		p.add(c, p.Tick()) // its first attempt runs
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		done := make(chan error)
		go func() {
			_, _, err := p.Acquire(ctx, key, 0, nil, nil, func() (*waitingMuxConn, error) {
				t.Error("dialed while a connection was settling")
				return nil, errors.New("no dial")
			}, Redialing{})
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

// TestMuxTakeRefusesExpired: a connection idle for the whole limit is
// never handed out, even when its timer has not fired (here stopped, as a
// loaded machine runs timers late): Take closes it and finds nothing.
// Fake time (testing/synctest).
func TestMuxTakeRefusesExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, c, _ := idleMuxConn()
		time.Sleep(999 * time.Millisecond)
		if got, _, _ := p.Take(Key{}, 0, nil, false); got != c {
			t.Fatalf("take within the limit: %v", got)
		}
		p.Done(c, true)
		c.Mux().idleRef.timer.Stop() // late
		time.Sleep(time.Second)
		if got, _, _ := p.Take(Key{}, 0, nil, false); got != nil {
			t.Fatalf("take after the limit handed out %v", got)
		}
		if !c.isClosed() || p.IdleCount() != 0 {
			t.Errorf("closed %v, %d idle; want closed and none", c.isClosed(), p.IdleCount())
		}
	})
}
