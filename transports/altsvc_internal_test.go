package transports

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseAltSvc(t *testing.T) {
	cases := []struct {
		name   string
		values []string
		port   uint16
		maxAge time.Duration
		clear  bool
		ok     bool
	}{
		{"same host", []string{`h3=":4433"`}, 4433, altSvcDefaultMaxAge, false, true},
		{"max age", []string{`h3=":443"; ma=60`}, 443, time.Minute, false, true},
		{"quoted max age and persist", []string{`h3=":443"; persist=1; ma="120"`}, 443, 2 * time.Minute, false, true},
		{"first h3 of a list", []string{`h2=":443", h3-29=":8443", h3=":9443"; ma=5, h3=":1"`}, 9443, 5 * time.Second, false, true},
		{"named own host", []string{`h3="example.com:8443"`}, 8443, altSvcDefaultMaxAge, false, true},
		{"across field lines", []string{`h2=":443"`, `h3=":7443"`}, 7443, altSvcDefaultMaxAge, false, true},
		{"other host ignored", []string{`h3="cdn.example.net:443"`}, 0, 0, false, false},
		{"comma inside quotes", []string{`h3="a,b:1", h3=":2"`}, 2, altSvcDefaultMaxAge, false, true},
		{"clear", []string{`clear`}, 0, 0, true, false},
		{"port zero", []string{`h3=":0"`}, 0, 0, false, false},
		{"unquoted authority", []string{`h3=:443`}, 0, 0, false, false},
		{"no port", []string{`h3="example.com"`}, 0, 0, false, false},
		{"garbage", []string{`;;,,=`}, 0, 0, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := time.Now()
			alt, clear, ok := parseAltSvc(c.values, "example.com")
			if clear != c.clear || ok != c.ok || alt.port != c.port {
				t.Fatalf("parseAltSvc(%q) = %+v clear %v ok %v; want port %d clear %v ok %v", c.values, alt, clear, ok, c.port, c.clear, c.ok)
			}
			if ok {
				if age := alt.expires.Sub(before); age < c.maxAge || age > c.maxAge+time.Minute {
					t.Errorf("lifetime %v, want %v", age, c.maxAge)
				}
			}
		})
	}
}

func TestAltSvcCache(t *testing.T) {
	var c altSvcCache
	now := time.Now()
	c.learn("example.com:443", "example.com", http.Header{"Alt-Svc": {`h3=":8443"; ma=10`}})
	if a, ok := c.lookup("example.com:443", now); !ok || a.port != 8443 {
		t.Fatalf("lookup = %+v, %v", a, ok)
	}
	if _, ok := c.lookup("example.com:443", now.Add(11*time.Second)); ok {
		t.Fatal("an expired advertisement is still used")
	}
	c.learn("example.com:443", "example.com", http.Header{"Alt-Svc": {`h3=":8443"`}})
	c.learn("example.com:443", "example.com", http.Header{"Alt-Svc": {`clear`}})
	if _, ok := c.lookup("example.com:443", now); ok {
		t.Fatal("clear did not drop the advertisement")
	}
	c.learn("example.com:443", "example.com", http.Header{"Alt-Svc": {`h3=":8443"`}})
	c.forget("example.com:443")
	if _, ok := c.lookup("example.com:443", now); ok {
		t.Fatal("forget did not drop the advertisement")
	}
	c.learn("example.com:443", "example.com", http.Header{})
	if len(c.m) != 0 {
		t.Fatalf("a response without Alt-Svc changed the cache: %v", c.m)
	}
}

// FuzzParseAltSvc checks that no field value makes the parser panic, that
// what it returns is usable (a port, a lifetime in the future), and that
// for a host no value can name (a NUL) only host-less alternatives, which
// need `":` in the value, are taken.
func FuzzParseAltSvc(f *testing.F) {
	for _, seed := range []string{
		`h3=":443"; ma=3600`, `clear`, `h2=":443", h3="example.com:8443"; persist=1`,
		`h3="other.example:443"`, `h3="\"quoted\":1"`, `h3=":443"; ma="x"`, `,,;;="`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		before := time.Now()
		alt, clear, ok := parseAltSvc([]string{v}, "example.com")
		if clear && ok {
			t.Fatalf("%q: both clear and an alternative", v)
		}
		if ok && (alt.port == 0 || alt.expires.Before(before)) {
			t.Fatalf("%q: unusable alternative %+v", v, alt)
		}
		// An alternative with a host part is taken only for that host.
		if _, _, ok := parseAltSvc([]string{v}, "\x00"); ok && !strings.Contains(v, `":`) && !strings.Contains(v, "\"\x00:") {
			t.Fatalf("%q: an alternative on another host was taken", v)
		}
	})
}
