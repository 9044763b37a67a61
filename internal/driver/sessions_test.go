package driver

import (
	"crypto/tls"
	"strconv"
	"testing"

	"github.com/replaysafe/replaysafe/internal/pool"
)

func sessionKey(i int) pool.Key {
	return pool.Key{Scheme: "https", Addr: "h" + strconv.Itoa(i) + ".example:443", Host: "h" + strconv.Itoa(i) + ".example"}
}

// TestSessionCacheBounded: a peer that hands out tickets for ever more
// names (or a caller with ever more routes) fills the cache to its bound
// and no further; the most recently used tickets stay.
func TestSessionCacheBounded(t *testing.T) {
	c := newSessionCache(0)
	if c.max != DefaultSessionTickets {
		t.Fatalf("default bound %d, want %d", c.max, DefaultSessionTickets)
	}
	states := make([]*tls.ClientSessionState, 10*DefaultSessionTickets)
	for i := range states {
		states[i] = &tls.ClientSessionState{}
		c.route(sessionKey(i)).Put("name", states[i])
		if n := c.Len(); n > DefaultSessionTickets {
			t.Fatalf("after %d tickets the cache holds %d, over its bound %d", i+1, n, DefaultSessionTickets)
		}
	}
	if n := c.Len(); n != DefaultSessionTickets {
		t.Fatalf("cache holds %d, want %d", n, DefaultSessionTickets)
	}
	last := len(states) - 1
	if got, ok := c.route(sessionKey(last)).Get("name"); !ok || got != states[last] {
		t.Errorf("the newest ticket is gone")
	}
	if _, ok := c.route(sessionKey(0)).Get("name"); ok {
		t.Errorf("the oldest ticket is still held")
	}
	// One name flooded with tickets keeps one entry.
	one := newSessionCache(4)
	for range 1000 {
		one.route(sessionKey(1)).Put("name", &tls.ClientSessionState{})
	}
	if n := one.Len(); n != 1 {
		t.Errorf("one name's tickets take %d entries, want 1", n)
	}
}

// TestSessionCacheRoutesApart: a route resumes only its own sessions;
// a nil Put forgets one; a Get makes a ticket recent.
func TestSessionCacheRoutesApart(t *testing.T) {
	c := newSessionCache(2)
	a, b := c.route(sessionKey(1)), c.route(sessionKey(2))
	sa := &tls.ClientSessionState{}
	a.Put("same-name", sa)
	if _, ok := b.Get("same-name"); ok {
		t.Fatal("route b resumes route a's session")
	}
	if got, ok := a.Get("same-name"); !ok || got != sa {
		t.Fatal("route a lost its session")
	}
	b.Put("same-name", &tls.ClientSessionState{})
	a.Get("same-name") // a is now the most recent
	c.route(sessionKey(3)).Put("x", &tls.ClientSessionState{})
	if _, ok := a.Get("same-name"); !ok {
		t.Error("the recently used ticket was dropped")
	}
	if _, ok := b.Get("same-name"); ok {
		t.Error("the least recently used ticket was kept")
	}
	a.Put("same-name", nil)
	if _, ok := a.Get("same-name"); ok || c.Len() != 1 {
		t.Errorf("a nil Put kept the ticket (len %d)", c.Len())
	}
	a.Put("never-stored", nil)
	if c.Len() != 1 {
		t.Errorf("a nil Put of a missing key added one (len %d)", c.Len())
	}
}
