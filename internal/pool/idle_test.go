package pool

import (
	"testing"
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
	p := NewIdle[*fakeIdleConn](2, time.Hour, limit)
	key := Key{Scheme: "http", Addr: "a:80", Host: "a"}
	limit.TryOpen(key)
	c := &fakeIdleConn{state: IdleState{Key: key}, limit: limit}
	p.Put(c)
	if c.state.timer == nil || c.state.Held() != c {
		t.Fatalf("idle connection: timer %v, its ref holds %v", c.state.timer, c.state.Held())
	}
	p.CloseIdle()
	if !c.closed {
		t.Fatal("CloseIdle left the connection open")
	}
	if got := c.state.Held(); got != nil {
		t.Errorf("closed connection still held by its idle timer: %v", got)
	}
	if c.state.timer.Stop() {
		t.Error("closed connection's idle timer was still running")
	}
	if n := p.IdleCount(); n != 0 {
		t.Errorf("%d idle after CloseIdle", n)
	}
}
