package replaysafe

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/internal/altsvc"
)

func TestAltSvcCache(t *testing.T) {
	c := newAltSvcCache()
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	origin := "example.com:443"
	learn := func(v string) { c.learn(origin, "example.com", http.Header{"Alt-Svc": {v}}, now) }
	learn(`h3=":8443"; ma=10`)
	if a, ok := c.lookup(origin, now); !ok || a.Port != 8443 {
		t.Fatalf("lookup = %+v, %v", a, ok)
	}
	if _, ok := c.lookup(origin, now.Add(10*time.Second)); ok {
		t.Fatal("an expired advertisement is still used")
	}
	learn(`h3=":8443"`)
	learn(`h2=":443"`) // silent on HTTP/3: the advertisement holds
	if _, ok := c.lookup(origin, now); !ok {
		t.Fatal("a value silent on HTTP/3 dropped the advertisement")
	}
	learn(`clear`)
	if _, ok := c.lookup(origin, now); ok {
		t.Fatal("clear did not drop the advertisement")
	}
	learn(`h3=":8443"`)
	c.forget(origin)
	if _, ok := c.lookup(origin, now); ok {
		t.Fatal("forget did not drop the advertisement")
	}
	c.learn(origin, "example.com", http.Header{}, now)
	if len(c.m) != 0 {
		t.Fatalf("a response without Alt-Svc changed the cache: %v", c.m)
	}
}

// TestMemoBounded: a memo full of destinations drops the stale entries
// first, then an arbitrary one, and always learns the new destination;
// it never holds more than maxMemo.
func TestMemoBounded(t *testing.T) {
	now := time.Now()
	c := newAltSvcCache()
	for i := range maxMemo {
		exp := now.Add(time.Hour)
		if i%2 == 0 {
			exp = now.Add(-time.Second) // expired
		}
		c.store(fmt.Sprintf("o%d:443", i), altsvc.H3{Port: 1, Expires: exp})
	}
	c.store("new:443", altsvc.H3{Port: 2, Expires: now.Add(time.Hour)})
	if n := c.len(); n != maxMemo/2+1 {
		t.Errorf("%d entries after the stale ones went, want %d", n, maxMemo/2+1)
	}
	if _, ok := c.lookup("new:443", now); !ok {
		t.Error("the new destination was not learned")
	}
	var live memo[int, bool]
	for i := range 3 * maxMemo {
		live.store(i, true)
		if live.len() > maxMemo {
			t.Fatalf("%d entries", live.len())
		}
	}
	if _, ok := live.load(3*maxMemo - 1); !ok {
		t.Error("the last destination was not learned")
	}
}
