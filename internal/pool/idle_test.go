package pool

import (
	"testing"
	"testing/synctest"
	"time"
)

// fakeIdleConn is an IdleConn that records its close and gives its room
// back as a real connection does.
type fakeIdleConn struct {
	state  IdleState
	limit  *Limit
	closed bool
}

func (c *fakeIdleConn) Idle() *IdleState { return &c.state }

func (c *fakeIdleConn) Close() {
	if !c.closed {
		c.closed = true
		c.state.Release()
		c.limit.Closed(c.state.Key)
	}
}

// TestIdleTimerStopsAndLetsGo: a pooled connection's idle timer holds it
// through a ref; once the connection closes (CloseIdle), the timer is
// stopped and the ref holds nothing, so neither the runtime's timer heap
// nor a late firing keeps a closed connection reachable.
func TestIdleTimerStopsAndLetsGo(t *testing.T) {
	limit := NewLimit(0)
	p := NewIdle[*fakeIdleConn](2, time.Hour, limit, nil)
	key := Key{Scheme: "http", Addr: "a:80", Host: "a"}
	limit.TryOpen(key)
	c := &fakeIdleConn{state: IdleState{Key: key}, limit: limit}
	p.Put(c)
	if c.state.ref == nil || c.state.Held() != c {
		t.Fatalf("idle connection: timer %v, its ref holds %v", c.state.ref, c.state.Held())
	}
	p.CloseIdle()
	if !c.closed {
		t.Fatal("CloseIdle left the connection open")
	}
	if got := c.state.Held(); got != nil {
		t.Errorf("closed connection still held by its idle timer: %v", got)
	}
	if c.state.ref.timer.Stop() {
		t.Error("closed connection's idle timer was still running")
	}
	if n := p.IdleCount(); n != 0 {
		t.Errorf("%d idle after CloseIdle", n)
	}
}

// TestIdleCapAcrossPools: one IdleCap bounds the idle connections of an
// Idle pool and a Mux pool together. With a cap of 2, the third
// connection to go idle evicts the one idle the longest, whichever pool
// holds it; a connection an attempt takes leaves the count, and one the
// cap chose after an attempt took it stays open.
func TestIdleCapAcrossPools(t *testing.T) {
	limit := NewLimit(0)
	cap := NewIdleCap(2)
	h1 := NewIdle[*fakeIdleConn](4, time.Hour, limit, cap)
	mux := NewMux[*fakeMuxConn](4, time.Hour, limit, cap)
	defer h1.CloseIdle()
	defer mux.CloseIdle()

	a := &fakeIdleConn{state: IdleState{Key: Key{Addr: "a:80"}}, limit: limit}
	limit.TryOpen(a.state.Key)
	h1.Put(a) // idle: 1
	m1 := &fakeMuxConn{state: MuxState{Key: Key{Addr: "m:443"}}}
	mux.add(m1, mux.Tick())
	mux.Done(m1, true) // idle: 2
	if n := cap.Len(); n != 2 || a.closed || m1.isClosed() {
		t.Fatalf("cap holds %d, closed %v %v", n, a.closed, m1.isClosed())
	}
	if got, _, _ := mux.Take(Key{Addr: "m:443"}, 0, nil, false); got != m1 || cap.Len() != 1 {
		t.Fatalf("take: %v, cap holds %d, want m1 and 1", got, cap.Len())
	}
	b := &fakeIdleConn{state: IdleState{Key: Key{Addr: "b:80"}}, limit: limit}
	limit.TryOpen(b.state.Key)
	h1.Put(b)          // idle: a, b
	mux.Done(m1, true) // idle: a, b, m1: a goes
	if !a.closed || b.closed || m1.isClosed() || cap.Len() != 2 {
		t.Fatalf("after the third: closed a=%v b=%v m1=%v, cap %d; want only a closed and 2 held", a.closed, b.closed, m1.isClosed(), cap.Len())
	}
	if _, ok := h1.Get(Key{Addr: "a:80"}); ok {
		t.Error("the evicted connection is still pooled")
	}
	if n := h1.IdleCount() + mux.IdleCount(); n != 2 {
		t.Errorf("%d idle in the pools, want 2", n)
	}
}

// TestIdleGetRefusesExpired: a connection idle for the whole limit is
// never handed out, even when its timer has not fired (here stopped, as a
// loaded machine runs timers late, and as a server closing idle
// connections at the same limit may be doing now): Get closes it, and
// the older ones with it. Fake time (testing/synctest).
func TestIdleGetRefusesExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit := NewLimit(0)
		p := NewIdle[*fakeIdleConn](4, time.Second, limit, nil)
		key := Key{Scheme: "http", Addr: "a:80", Host: "a"}
		conns := make([]*fakeIdleConn, 3)
		for i := range conns {
			limit.TryOpen(key)
			conns[i] = &fakeIdleConn{state: IdleState{Key: key}, limit: limit}
			p.Put(conns[i])
			conns[i].state.ref.timer.Stop() // late
			time.Sleep(100 * time.Millisecond)
		}
		// At 0.3 s: the newest is handed out.
		if got, ok := p.Get(key); !ok || got != conns[2] {
			t.Fatalf("get within the limit: %v %v, want the newest", got, ok)
		}
		time.Sleep(time.Second) // the other two are past the limit
		if got, ok := p.Get(key); ok {
			t.Fatalf("get after the limit handed out %v", got)
		}
		if !conns[0].closed || !conns[1].closed || conns[2].closed || p.IdleCount() != 0 {
			t.Errorf("closed %v %v %v, %d idle; want the two expired closed, none idle", conns[0].closed, conns[1].closed, conns[2].closed, p.IdleCount())
		}
	})
}
