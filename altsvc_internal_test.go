package replaysafe

import (
	"net/http"
	"testing"
	"time"
)

func TestAltSvcCache(t *testing.T) {
	var c altSvcCache
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
