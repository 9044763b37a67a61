package pool

import (
	"testing"
	"time"
)

// TestLearnNeedsTheSameCountTwice: a GOAWAY that displaced streams after
// a connection served n teaches the route a limit of n streams per
// connection only when the GOAWAY before it on that route showed the
// same n (a server's fixed keepalive_requests); counts that differ (a
// connection ended by chance: a drain, a random lifetime) teach nothing,
// so the route's connections stay uncapped.
func TestLearnNeedsTheSameCountTwice(t *testing.T) {
	p := NewMux[*fakeMuxConn](2, time.Hour, NewLimit(0), nil)
	key := Key{Addr: "a:443"}
	now := time.Now() // budgetLocked reads the clock for the limit's expiry
	goaway := func(served, started int) {
		c := &fakeMuxConn{}
		c.state.Key, c.state.started = key, started
		p.Learn(c, served, now)
	}
	budget := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.budgetLocked(key)
	}
	for _, served := range []int{37, 5, 212, 9} { // random lifetimes
		goaway(served, served+20)
		if b := budget(); b != 0 {
			t.Fatalf("after a GOAWAY at %d: a limit of %d learned from counts that differ", served, b)
		}
	}
	goaway(10, 64) // nginx keepalive_requests 10, twice in a row
	goaway(10, 54)
	if b := budget(); b != 10 {
		t.Errorf("after two GOAWAYs at 10: limit %d, want 10", b)
	}
	goaway(10, 10) // displaced nothing: teaches nothing, keeps the limit
	if b := budget(); b != 10 {
		t.Errorf("after a GOAWAY that displaced nothing: limit %d, want 10", b)
	}
}
