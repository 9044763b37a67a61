package replaysafe

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/fsm/plan"
)

func snapshotOf(t *testing.T, tr *Transport, rawURL string) (connKey, *routeSnapshot, error) {
	t.Helper()
	req, err := http.NewRequest("GET", rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := validate(req)
	if err != nil {
		t.Fatal(err)
	}
	urls, err := tr.proxies(req)
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Make(tr.planInput(req, key, len(urls) > 0))
	return tr.snapshot(req, key, urls, p.First().Route)
}

func TestSnapshotKeys(t *testing.T) {
	direct := New(Options{})
	k, snap, err := snapshotOf(t, direct, "http://Example.COM/x")
	if err != nil || snap == nil || k.route.String() != "http://example.com:80 policy=h1" || snap.route.Proxied() {
		t.Fatalf("direct: key %v, snapshot %v, %v", k.route, snap, err)
	}
	k2, _, _ := snapshotOf(t, direct, "http://example.com:80/y")
	if k2.route != k.route {
		t.Errorf("implicit and explicit port 80 differ: %v, %v", k.route, k2.route)
	}
	k, _, err = snapshotOf(t, direct, "http://bücher.example/")
	if err != nil || k.route.String() != "http://xn--bcher-kva.example:80 policy=h1" {
		t.Errorf("IDN host: key %v, %v", k.route, err)
	}

	password := "hunter2"
	viaProxy := New(Options{Proxy: func(*http.Request) (*url.URL, error) {
		return &url.URL{Scheme: "http", Host: "proxy.internal:3128", User: url.UserPassword("u", password)}, nil
	}})
	k, snap, err = snapshotOf(t, viaProxy, "https://example.com/")
	if err != nil || !snap.route.Proxied() || len(snap.configs) != 1 || snap.configs[0].Auth == nil {
		t.Fatalf("proxied: %v, %+v, %v", k.route, snap, err)
	}
	ks := k.route.String()
	if !strings.HasPrefix(ks, `https://example.com:443 policy=h1 via http://proxy.internal:3128 cred="u#`) || strings.Contains(ks, password) {
		t.Errorf("proxied key %q", ks)
	}
	password = "other"
	k2, _, _ = snapshotOf(t, viaProxy, "https://example.com/")
	if k2.route == k.route {
		t.Errorf("other credentials share the key %v", k.route)
	}

	h := http.Header{"Proxy-Authorization": {"Basic x"}, "Accept": {"*/*"}}
	if got := snap.header(h); got["Proxy-Authorization"] != nil || got.Get("Accept") != "*/*" || h.Get("Proxy-Authorization") == "" {
		t.Errorf("header %v (caller's now %v)", got, h)
	}
	var none *routeSnapshot
	if got := none.header(h); got.Get("Proxy-Authorization") == "" {
		t.Errorf("direct route dropped Proxy-Authorization")
	}
}

func TestProxyCredentialsHidePassword(t *testing.T) {
	c := &ProxyCredentials{ID: "id", Username: "u", Password: "hunter2"}
	for _, s := range []string{fmt.Sprintf("%v", c), fmt.Sprintf("%+v", *c), fmt.Sprintf("%#v", c), fmt.Sprint((*ProxyCredentials)(nil))} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("%q shows the password", s)
		}
	}
}

// TestProtocolIsPlanPolicy: the plan's policies are the Transport's
// Protocol values, in the same order (RoundTrip converts one to the
// other).
func TestProtocolIsPlanPolicy(t *testing.T) {
	for p := ProtocolHTTP1; p < protocolCount; p++ {
		if got := plan.Policy(p).String(); got != p.String() {
			t.Errorf("Protocol %s is plan policy %s", p, got)
		}
	}
}
