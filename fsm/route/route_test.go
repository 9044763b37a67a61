package route

import (
	"errors"
	"slices"
	"testing"
)

func TestEnumStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{SchemeUnknown.String(), "unknown"},
		{SchemeHTTP.String(), "http"},
		{SchemeHTTPS.String(), "https"},
		{Scheme(9).String(), "Scheme(9)"},
		{ProxyUnknown.String(), "unknown"},
		{ProxyHTTP.String(), "http"},
		{ProxyHTTPS.String(), "https"},
		{ProxySOCKS5.String(), "socks5"},
		{ProxyKind(200).String(), "ProxyKind(200)"},
		{PolicyNegotiate.String(), "negotiate"},
		{PolicyH1.String(), "h1"},
		{PolicyH2.String(), "h2"},
		{PolicyH3.String(), "h3"},
		{Policy(4).String(), "Policy(4)"},
		{Instant(1500e6).String(), "1.5s"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestParseEnums(t *testing.T) {
	for s := range Scheme(3) {
		got, ok := ParseScheme(s.String())
		if ok != (s != SchemeUnknown) || ok && got != s {
			t.Errorf("ParseScheme(%q) = %v, %v", s, got, ok)
		}
	}
	if got, ok := ParseScheme("HTTPS"); !ok || got != SchemeHTTPS {
		t.Errorf("ParseScheme(HTTPS) = %v, %v; schemes are case-insensitive", got, ok)
	}
	for k := range ProxyKind(4) {
		got, ok := ParseProxyKind(k.String())
		if ok != (k != ProxyUnknown) || ok && got != k {
			t.Errorf("ParseProxyKind(%q) = %v, %v", k, got, ok)
		}
	}
	for p := range policyCount {
		if got, ok := ParsePolicy(p.String()); !ok || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p, got, ok)
		}
	}
	for _, bad := range []string{"", "ws", "socks4", "h2c", "Policy(4)"} {
		if _, ok := ParseScheme(bad); ok {
			t.Errorf("ParseScheme(%q) ok", bad)
		}
		if _, ok := ParseProxyKind(bad); ok {
			t.Errorf("ParseProxyKind(%q) ok", bad)
		}
		if _, ok := ParsePolicy(bad); ok {
			t.Errorf("ParsePolicy(%q) ok", bad)
		}
	}
}

func TestDefaultPorts(t *testing.T) {
	tests := []struct {
		got, want uint16
	}{
		{SchemeHTTP.DefaultPort(), 80},
		{SchemeHTTPS.DefaultPort(), 443},
		{SchemeUnknown.DefaultPort(), 0},
		{ProxyHTTP.DefaultPort(), 80},
		{ProxyHTTPS.DefaultPort(), 443},
		{ProxySOCKS5.DefaultPort(), 1080},
		{ProxyUnknown.DefaultPort(), 0},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %d, want %d", i, tt.got, tt.want)
		}
	}
}

func TestPolicyALPN(t *testing.T) {
	tests := []struct {
		p    Policy
		want []string
	}{
		{PolicyNegotiate, []string{"h2", "http/1.1"}},
		{PolicyH1, []string{"http/1.1"}},
		{PolicyH2, []string{"h2"}},
		{PolicyH3, []string{"h3"}},
		{Policy(9), nil},
	}
	for _, tt := range tests {
		if got := tt.p.ALPN(); !slices.Equal(got, tt.want) {
			t.Errorf("%v.ALPN() = %q, want %q", tt.p, got, tt.want)
		}
	}
	a := PolicyNegotiate.ALPN()
	a[0] = "mutated"
	if PolicyNegotiate.ALPN()[0] != "h2" {
		t.Error("ALPN shares its slice")
	}
}

func mustNew(t *testing.T, s Spec) Route {
	t.Helper()
	r, err := New(s)
	if err != nil {
		t.Fatalf("New(%+v): %v", s, err)
	}
	return r
}

func TestNewCanonical(t *testing.T) {
	tests := []struct {
		name     string
		spec     Spec
		addr     string
		key      string
		proxied  bool
		numHops  int
		hop0Addr string
	}{
		{
			name: "http implicit port",
			spec: Spec{Scheme: SchemeHTTP, Host: "example.com"},
			addr: "example.com:80", key: "http://example.com:80 policy=negotiate",
		},
		{
			name: "https implicit port",
			spec: Spec{Scheme: SchemeHTTPS, Host: "example.com"},
			addr: "example.com:443", key: "https://example.com:443 policy=negotiate",
		},
		{
			name: "explicit non-default port kept",
			spec: Spec{Scheme: SchemeHTTPS, Host: "example.com", Port: 8443, Policy: PolicyH2},
			addr: "example.com:8443", key: "https://example.com:8443 policy=h2",
		},
		{
			name: "host lower-cased",
			spec: Spec{Scheme: SchemeHTTP, Host: "EXAMPLE.Com", Port: 80},
			addr: "example.com:80", key: "http://example.com:80 policy=negotiate",
		},
		{
			name: "IPv6 with brackets",
			spec: Spec{Scheme: SchemeHTTPS, Host: "[2001:DB8::0001]"},
			addr: "[2001:db8::1]:443", key: "https://[2001:db8::1]:443 policy=negotiate",
		},
		{
			name: "IPv6 without brackets",
			spec: Spec{Scheme: SchemeHTTP, Host: "::1", Port: 8080},
			addr: "[::1]:8080", key: "http://[::1]:8080 policy=negotiate",
		},
		{
			name: "IPv4",
			spec: Spec{Scheme: SchemeHTTP, Host: "127.0.0.1", Port: 9},
			addr: "127.0.0.1:9", key: "http://127.0.0.1:9 policy=negotiate",
		},
		{
			name: "proxy bypassed: chain ignored",
			spec: Spec{Scheme: SchemeHTTP, Host: "a.test", UseProxy: false, Chain: []Hop{{Kind: ProxyHTTP, Host: "p"}}},
			addr: "a.test:80", key: "http://a.test:80 policy=negotiate",
		},
		{
			name: "one http proxy with default port",
			spec: Spec{Scheme: SchemeHTTPS, Host: "a.test", UseProxy: true, Chain: []Hop{{Kind: ProxyHTTP, Host: "Proxy.test"}}},
			addr: "a.test:443", key: "https://a.test:443 policy=negotiate via http://proxy.test:80",
			proxied: true, numHops: 1, hop0Addr: "proxy.test:80",
		},
		{
			name: "chain with credentials",
			spec: Spec{Scheme: SchemeHTTP, Host: "a.test", UseProxy: true, Policy: PolicyH1, Chain: []Hop{
				{Kind: ProxyHTTPS, Host: "p1.test", CredentialID: `alice#k1 "x"`},
				{Kind: ProxySOCKS5, Host: "10.0.0.1", Port: 1081},
			}},
			addr:    "a.test:80",
			key:     `http://a.test:80 policy=h1 via https://p1.test:443 cred="alice#k1 \"x\"" > socks5://10.0.0.1:1081`,
			proxied: true, numHops: 2, hop0Addr: "p1.test:443",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.spec)
			if r.Addr() != tt.addr {
				t.Errorf("Addr = %q, want %q", r.Addr(), tt.addr)
			}
			if r.Key().String() != tt.key || r.String() != tt.key {
				t.Errorf("Key = %q, want %q", r.Key(), tt.key)
			}
			if r.Proxied() != tt.proxied || r.NumHops() != tt.numHops || len(r.Hops()) != tt.numHops {
				t.Errorf("Proxied=%v NumHops=%d, want %v %d", r.Proxied(), r.NumHops(), tt.proxied, tt.numHops)
			}
			if tt.numHops > 0 && r.Hop(0).Addr() != tt.hop0Addr {
				t.Errorf("Hop(0).Addr = %q, want %q", r.Hop(0).Addr(), tt.hop0Addr)
			}
			if r.Scheme() != tt.spec.Scheme || r.Policy() != tt.spec.Policy {
				t.Errorf("Scheme/Policy = %v/%v", r.Scheme(), r.Policy())
			}
		})
	}
}

func TestKeyIdentity(t *testing.T) {
	p := func(hops ...Hop) Spec {
		return Spec{Scheme: SchemeHTTPS, Host: "a.test", UseProxy: true, Chain: hops}
	}
	h := Hop{Kind: ProxyHTTP, Host: "p.test", Port: 3128}
	same := []struct {
		name string
		a, b Spec
	}{
		{"implicit and explicit default port", Spec{Scheme: SchemeHTTP, Host: "a.test"}, Spec{Scheme: SchemeHTTP, Host: "a.test", Port: 80}},
		{"https implicit and explicit 443", Spec{Scheme: SchemeHTTPS, Host: "a.test"}, Spec{Scheme: SchemeHTTPS, Host: "a.test", Port: 443}},
		{"host case", Spec{Scheme: SchemeHTTP, Host: "A.TEST"}, Spec{Scheme: SchemeHTTP, Host: "a.test"}},
		{"no proxy configured vs bypassed", Spec{Scheme: SchemeHTTP, Host: "a.test"}, Spec{Scheme: SchemeHTTP, Host: "a.test", Chain: []Hop{h}}},
		{"proxy default port implicit and explicit", p(Hop{Kind: ProxySOCKS5, Host: "s"}), p(Hop{Kind: ProxySOCKS5, Host: "s", Port: 1080})},
		{"IPv6 spellings", Spec{Scheme: SchemeHTTP, Host: "[::1]"}, Spec{Scheme: SchemeHTTP, Host: "0:0::1"}},
	}
	for _, tt := range same {
		if a, b := mustNew(t, tt.a).Key(), mustNew(t, tt.b).Key(); a != b {
			t.Errorf("%s: keys differ: %q vs %q", tt.name, a, b)
		}
	}
	differ := []struct {
		name string
		a, b Spec
	}{
		{"scheme", Spec{Scheme: SchemeHTTP, Host: "a.test", Port: 443}, Spec{Scheme: SchemeHTTPS, Host: "a.test"}},
		{"explicit non-default port", Spec{Scheme: SchemeHTTP, Host: "a.test"}, Spec{Scheme: SchemeHTTP, Host: "a.test", Port: 8080}},
		{"host", Spec{Scheme: SchemeHTTP, Host: "a.test"}, Spec{Scheme: SchemeHTTP, Host: "b.test"}},
		{"policy", Spec{Scheme: SchemeHTTPS, Host: "a.test"}, Spec{Scheme: SchemeHTTPS, Host: "a.test", Policy: PolicyH1}},
		{"direct vs proxied", Spec{Scheme: SchemeHTTPS, Host: "a.test"}, p(h)},
		{"credentials vs none", p(h), p(Hop{Kind: ProxyHTTP, Host: "p.test", Port: 3128, CredentialID: "alice"})},
		{"different credentials", p(Hop{Kind: ProxyHTTP, Host: "p.test", Port: 3128, CredentialID: "alice"}), p(Hop{Kind: ProxyHTTP, Host: "p.test", Port: 3128, CredentialID: "bob"})},
		{"proxy kind", p(h), p(Hop{Kind: ProxyHTTPS, Host: "p.test", Port: 3128})},
		{"proxy port", p(h), p(Hop{Kind: ProxyHTTP, Host: "p.test", Port: 3129})},
		{"proxy host", p(h), p(Hop{Kind: ProxyHTTP, Host: "q.test", Port: 3128})},
		{"hop order", p(h, Hop{Kind: ProxySOCKS5, Host: "s"}), p(Hop{Kind: ProxySOCKS5, Host: "s"}, h)},
		{"chain length", p(h), p(h, h)},
		{"credential on another hop", p(Hop{Kind: ProxyHTTP, Host: "x", CredentialID: "c"}, Hop{Kind: ProxyHTTP, Host: "y"}), p(Hop{Kind: ProxyHTTP, Host: "x"}, Hop{Kind: ProxyHTTP, Host: "y", CredentialID: "c"})},
		{"credential text that looks like a hop", p(Hop{Kind: ProxyHTTP, Host: "x", CredentialID: `c" > http://y:80`}), p(Hop{Kind: ProxyHTTP, Host: "x", CredentialID: "c"}, Hop{Kind: ProxyHTTP, Host: "y"})},
	}
	for _, tt := range differ {
		if a, b := mustNew(t, tt.a).Key(), mustNew(t, tt.b).Key(); a == b {
			t.Errorf("%s: keys equal: %q", tt.name, a)
		}
	}
	pool := map[Key]int{}
	pool[mustNew(t, p(h)).Key()]++
	pool[mustNew(t, p(h)).Key()]++
	if len(pool) != 1 || pool[mustNew(t, p(h)).Key()] != 2 {
		t.Errorf("Key does not work as a map key: %v", pool)
	}
	if (Route{}).Key() == mustNew(t, Spec{Scheme: SchemeHTTP, Host: "a"}).Key() {
		t.Error("zero route's key matches a valid route")
	}
}

func TestNewRejects(t *testing.T) {
	ok := Hop{Kind: ProxyHTTP, Host: "p"}
	tests := []struct {
		name  string
		spec  Spec
		field string
	}{
		{"no scheme", Spec{Host: "a"}, "Scheme"},
		{"bad scheme", Spec{Scheme: Scheme(7), Host: "a"}, "Scheme"},
		{"empty host", Spec{Scheme: SchemeHTTP}, "Host"},
		{"space in host", Spec{Scheme: SchemeHTTP, Host: "a b"}, "Host"},
		{"quote in host", Spec{Scheme: SchemeHTTP, Host: `a"b`}, "Host"},
		{"host with port", Spec{Scheme: SchemeHTTP, Host: "a:80"}, "Host"},
		{"non-ASCII host", Spec{Scheme: SchemeHTTP, Host: "bücher.example"}, "Host"},
		{"brackets around a name", Spec{Scheme: SchemeHTTP, Host: "[a]"}, "Host"},
		{"bad IPv6", Spec{Scheme: SchemeHTTP, Host: "[::g]"}, "Host"},
		{"bad zone", Spec{Scheme: SchemeHTTP, Host: "fe80::1%a b"}, "Host"},
		{"long host", Spec{Scheme: SchemeHTTP, Host: string(make([]byte, 254))}, "Host"},
		{"bad policy", Spec{Scheme: SchemeHTTP, Host: "a", Policy: Policy(9)}, "Policy"},
		{"empty chain", Spec{Scheme: SchemeHTTP, Host: "a", UseProxy: true}, "Chain"},
		{"long chain", Spec{Scheme: SchemeHTTP, Host: "a", UseProxy: true, Chain: make([]Hop, MaxHops+1)}, "Chain"},
		{"h3 through a proxy", Spec{Scheme: SchemeHTTPS, Host: "a", UseProxy: true, Policy: PolicyH3, Chain: []Hop{ok}}, "Policy"},
		{"hop kind unset", Spec{Scheme: SchemeHTTP, Host: "a", UseProxy: true, Chain: []Hop{ok, {Host: "p"}}}, "Chain[1].Kind"},
		{"hop kind invalid", Spec{Scheme: SchemeHTTP, Host: "a", UseProxy: true, Chain: []Hop{{Kind: ProxyKind(9), Host: "p"}}}, "Chain[0].Kind"},
		{"hop host empty", Spec{Scheme: SchemeHTTP, Host: "a", UseProxy: true, Chain: []Hop{{Kind: ProxySOCKS5}}}, "Chain[0].Host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.spec)
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("New = %v, want *SpecError", err)
			}
			if se.Field != tt.field {
				t.Errorf("Field = %q, want %q (%v)", se.Field, tt.field, err)
			}
		})
	}
	if _, err := New(Spec{Scheme: SchemeHTTPS, Host: "a", Policy: PolicyH3}); err != nil {
		t.Errorf("direct h3: %v", err)
	}
	want := `route: Host "a b": invalid character ' ' in host name`
	if _, err := New(Spec{Scheme: SchemeHTTP, Host: "a b"}); err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

func TestRouteImmutable(t *testing.T) {
	chain := []Hop{{Kind: ProxyHTTP, Host: "p1"}, {Kind: ProxyHTTP, Host: "p2"}}
	r := mustNew(t, Spec{Scheme: SchemeHTTP, Host: "a", UseProxy: true, Chain: chain})
	key := r.Key()
	chain[0].Host = "evil"
	got := r.Hops()
	got[1].CredentialID = "evil"
	if r.Hop(0).Host != "p1" || r.Hop(1).CredentialID != "" || r.Key() != key {
		t.Errorf("route changed through a shared slice: %v", r)
	}
	c := r // a copy is a snapshot of the same route
	if c.Key() != r.Key() {
		t.Error("copy has another key")
	}
}

func TestHopString(t *testing.T) {
	tests := []struct {
		h    Hop
		want string
	}{
		{Hop{Kind: ProxyHTTP, Host: "p", Port: 3128}, "http://p:3128"},
		{Hop{Kind: ProxySOCKS5, Host: "::1"}, "socks5://[::1]:1080"},
		{Hop{Kind: ProxyHTTPS, Host: "p", CredentialID: "id"}, `https://p:443 cred="id"`},
	}
	for _, tt := range tests {
		if got := tt.h.String(); got != tt.want {
			t.Errorf("String = %q, want %q", got, tt.want)
		}
	}
}

// TestForwardKey: absolute-form routes through one proxy share a key
// whatever their origin (one proxy connection carries requests to any
// origin), differ by proxy, credentials and from the CONNECT route to
// the same origin, and are refused where absolute form does not apply.
func TestForwardKey(t *testing.T) {
	proxy := Hop{Kind: ProxyHTTP, Host: "proxy.example", Port: 3128, CredentialID: "u#1"}
	mk := func(host string, fwd bool, hop Hop) Route {
		t.Helper()
		r, err := New(Spec{Scheme: SchemeHTTP, Host: host, UseProxy: true, Chain: []Hop{hop}, Policy: PolicyH1, Forward: fwd})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := mk("a.example", true, proxy), mk("b.example", true, proxy)
	if a.Key() != b.Key() || !a.Forward() {
		t.Errorf("forward routes to two origins: %v, %v", a.Key(), b.Key())
	}
	if got := a.Key().String(); got != `http://* forward policy=h1 via http://proxy.example:3128 cred="u#1"` {
		t.Errorf("forward key %q", got)
	}
	if a.Addr() != "a.example:80" {
		t.Errorf("the origin is still the route's: %s", a.Addr())
	}
	other := proxy
	other.CredentialID = "u#2"
	if mk("a.example", true, other).Key() == a.Key() {
		t.Error("other credentials share the forward key")
	}
	if mk("a.example", false, proxy).Key() == a.Key() {
		t.Error("the CONNECT route shares the forward key")
	}
	socks := Hop{Kind: ProxySOCKS5, Host: "s.example"}
	for name, s := range map[string]Spec{
		"https origin": {Scheme: SchemeHTTPS, Host: "a.example", UseProxy: true, Chain: []Hop{proxy}, Policy: PolicyH1, Forward: true},
		"no proxy":     {Scheme: SchemeHTTP, Host: "a.example", Policy: PolicyH1, Forward: true},
		"socks5 hop":   {Scheme: SchemeHTTP, Host: "a.example", UseProxy: true, Chain: []Hop{socks}, Policy: PolicyH1, Forward: true},
		"two hops":     {Scheme: SchemeHTTP, Host: "a.example", UseProxy: true, Chain: []Hop{proxy, proxy}, Policy: PolicyH1, Forward: true},
		"h2 policy":    {Scheme: SchemeHTTP, Host: "a.example", UseProxy: true, Chain: []Hop{proxy}, Policy: PolicyH2, Forward: true},
	} {
		var se *SpecError
		if _, err := New(s); !errors.As(err, &se) || se.Field != "Forward" {
			t.Errorf("%s: %v, want a SpecError for Forward", name, err)
		}
	}
}
