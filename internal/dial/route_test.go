package dial

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/internal/pool"
)

// routeOf resolves the HTTP/1.1 route of a GET of rawURL through d, as
// a call's first try does.
func routeOf(t *testing.T, d *Dialer, rawURL string) (pool.Key, *Route, error) {
	t.Helper()
	req, err := http.NewRequest("GET", rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	port := "80"
	if req.URL.Scheme == "https" {
		port = "443"
	}
	if req.URL.Port() != "" {
		port = req.URL.Port()
	}
	key := pool.Key{Scheme: req.URL.Scheme, Addr: req.URL.Hostname() + ":" + port, Host: req.URL.Hostname()}
	urls, err := d.Proxies(req)
	if err != nil {
		t.Fatal(err)
	}
	return d.Route(req, key, urls, route.PolicyH1)
}

// TestRouteKeys: a direct route's key is its scheme, host (IDN in ASCII)
// and effective port; a proxied one's names the proxy and an identity
// of the credentials that never shows the password, and differs with
// them; the origin's header loses Proxy-Authorization on a proxied route
// only.
func TestRouteKeys(t *testing.T) {
	direct := New(Config{})
	k, snap, err := routeOf(t, direct, "http://Example.COM/x")
	if err != nil || snap == nil || k.Route.String() != "http://example.com:80 policy=h1" || snap.route.Proxied() {
		t.Fatalf("direct: key %v, snapshot %v, %v", k.Route, snap, err)
	}
	k2, _, _ := routeOf(t, direct, "http://example.com:80/y")
	if k2.Route != k.Route {
		t.Errorf("implicit and explicit port 80 differ: %v, %v", k.Route, k2.Route)
	}
	k, _, err = routeOf(t, direct, "http://bücher.example/")
	if err != nil || k.Route.String() != "http://xn--bcher-kva.example:80 policy=h1" {
		t.Errorf("IDN host: key %v, %v", k.Route, err)
	}

	password := "hunter2"
	viaProxy := New(Config{Proxy: func(*http.Request) (*url.URL, error) {
		return &url.URL{Scheme: "http", Host: "proxy.internal:3128", User: url.UserPassword("u", password)}, nil
	}})
	k, snap, err = routeOf(t, viaProxy, "https://example.com/")
	if err != nil || !snap.route.Proxied() || len(snap.configs) != 1 || snap.configs[0].Auth == nil {
		t.Fatalf("proxied: %v, %+v, %v", k.Route, snap, err)
	}
	ks := k.Route.String()
	if !strings.HasPrefix(ks, `https://example.com:443 policy=h1 via http://proxy.internal:3128 cred="u#`) || strings.Contains(ks, password) {
		t.Errorf("proxied key %q", ks)
	}
	password = "other"
	k2, _, _ = routeOf(t, viaProxy, "https://example.com/")
	if k2.Route == k.Route {
		t.Errorf("other credentials share the key %v", k.Route)
	}

	h := http.Header{"Proxy-Authorization": {"Basic x"}, "Accept": {"*/*"}}
	if got := snap.Header(h); got["Proxy-Authorization"] != nil || got.Get("Accept") != "*/*" || h.Get("Proxy-Authorization") == "" {
		t.Errorf("header %v (caller's now %v)", got, h)
	}
	var none *Route
	if got := none.Header(h); got.Get("Proxy-Authorization") == "" {
		t.Errorf("direct route dropped Proxy-Authorization")
	}
}
