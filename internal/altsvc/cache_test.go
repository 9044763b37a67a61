package altsvc

import (
	"net/http"
	"testing"
	"time"
)

func TestAltSvcCache(t *testing.T) {
	c := NewCache()
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	origin := "example.com:443"
	learn := func(v string) { c.Learn(origin, "example.com", http.Header{"Alt-Svc": {v}}, now) }
	learn(`h3=":8443"; ma=10`)
	if a, ok := c.Lookup(origin, now); !ok || a.Port != 8443 {
		t.Fatalf("lookup = %+v, %v", a, ok)
	}
	if _, ok := c.Lookup(origin, now.Add(10*time.Second)); ok {
		t.Fatal("an expired advertisement is still used")
	}
	learn(`h3=":8443"`)
	learn(`h2=":443"`) // silent on HTTP/3: the advertisement holds
	if _, ok := c.Lookup(origin, now); !ok {
		t.Fatal("a value silent on HTTP/3 dropped the advertisement")
	}
	learn(`clear`)
	if _, ok := c.Lookup(origin, now); ok {
		t.Fatal("clear did not drop the advertisement")
	}
	learn(`h3=":8443"`)
	c.Forget(origin)
	if _, ok := c.Lookup(origin, now); ok {
		t.Fatal("forget did not drop the advertisement")
	}
	c.Learn(origin, "example.com", http.Header{}, now)
	if c.Len() != 0 {
		t.Fatalf("a response without Alt-Svc changed the cache: %d entries", c.Len())
	}
}
