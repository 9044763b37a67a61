//go:build linux

package replaysafe_test

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpproxy"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/testservers/squid"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// TestSquidStockAbsoluteForm runs Debian's squid with the access rules of
// its stock squid.conf (read from /etc/squid at test time: "deny CONNECT
// !SSL_ports", "allow localhost", "deny all"; only the ports, paths and
// an authenticating port are the test's) in front of a scripted origin on
// a loopback port above 1024, and counts at the origin:
//
//   - GET, POST and PUT to plain http deliver exactly one copy each,
//     through one proxy connection, in absolute form;
//   - the same through the port that requires Basic credentials, with
//     the route's credentials, and a 407 without them (a response,
//     delivered, nothing reaching the origin);
//   - NO_PROXY naming the origin sends it direct: squid logs nothing;
//   - a CONNECT tunnel to the same origin (ProxyConnectPlainHTTP) is
//     refused by the stock rules with 403, the failure the absolute form
//     avoids.
func TestSquidStockAbsoluteForm(t *testing.T) {
	bin := squid.Binary(t)
	sq := squid.Start(t, bin, squid.Config{Rules: squid.StockRules(t), Auth: true})
	o := start(t, replaysafetest.Config{})
	open := &url.URL{Scheme: "http", Host: sq.Open.Addr()}
	authed := &url.URL{Scheme: "http", Host: sq.Auth.Addr(), User: url.UserPassword(squid.User, squid.Password)}
	via := func(u *url.URL) replaysafe.Options {
		return replaysafe.Options{Proxy: func(*http.Request) (*url.URL, error) { return u, nil }}
	}

	tr, _ := client(t, o, via(open))
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/get", ""}, {"POST", "/post", "posted"}, {"PUT", "/put", "put"},
	} {
		code, body, err := roundTrip(tr, newRequest(t, t.Context(), c.method, o.URL()+c.path, c.body))
		if err != nil || code != 200 || body != "ok" {
			t.Fatalf("%s %s through stock squid: %d %q %v", c.method, c.path, code, body, err)
		}
		if got := wantCopies(t, o, c.path, 1); string(got[0].Body) != c.body {
			t.Errorf("%s: origin got body %q", c.path, got[0].Body)
		}
	}

	trAuth, _ := client(t, o, via(authed))
	get(t, trAuth, o, "/authed")
	wantCopies(t, o, "/authed", 1)
	noCreds := *authed
	noCreds.User = nil
	trNoCreds, _ := client(t, o, via(&noCreds))
	if code, _, err := roundTrip(trNoCreds, newRequest(t, t.Context(), "GET", o.URL()+"/unauthed", "")); err != nil || code != http.StatusProxyAuthRequired {
		t.Errorf("GET without credentials: %d %v, want squid's 407", code, err)
	}
	wantCopies(t, o, "/unauthed", 0)

	sel := proxy.NewSelector(httpproxy.Config{HTTPProxy: open.String(), NoProxy: o.Addr()})
	trNo, _ := client(t, o, replaysafe.Options{Proxy: func(r *http.Request) (*url.URL, error) { return sel.Proxy(r.URL) }})
	get(t, trNo, o, "/direct")
	wantCopies(t, o, "/direct", 1)

	trConnect, _ := client(t, o, replaysafe.Options{ProxyConnectPlainHTTP: true, Proxy: via(open).Proxy})
	_, _, err := roundTrip(trConnect, newRequest(t, t.Context(), "GET", o.URL()+"/tunneled", ""))
	var ce *proxy.ConnectError
	if !errors.As(err, &ce) || ce.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT to port %s through stock squid: %v, want its 403", o.Addr(), err)
	}
	wantCopies(t, o, "/tunneled", 0)

	var got []string
	for _, e := range sq.AccessLog(t) {
		got = append(got, e.Method+" "+strings.TrimPrefix(e.URL, o.URL())+" "+e.Result[strings.IndexByte(e.Result, '/')+1:]+" "+e.User)
	}
	want := []string{
		"GET /get 200 -", "POST /post 200 -", "PUT /put 200 -",
		"GET /authed 200 " + squid.User, "GET /unauthed 407 -",
		"CONNECT " + o.Addr() + " 403 -",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("squid logged\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestSquidStockCrossing: the client's kept-alive connection to the proxy
// closes as the next request arrives. Squid's own idle timeout fires on
// its one-second timer, so it cannot be made to cross a request on cue;
// a scripted forward proxy in front of the stock squid closes on cue
// instead, after squid and the origin processed the request (the origin
// counted it, the client saw no response byte). A GET is resent once,
// and squid and the origin see it twice, identical; a POST is not.
func TestSquidStockCrossing(t *testing.T) {
	bin := squid.Binary(t)
	sq := squid.Start(t, bin, squid.Config{Rules: squid.StockRules(t)})
	for _, c := range []struct {
		method, body string
		copies       int
	}{{"GET", "", 2}, {"POST", "pay", 1}} {
		t.Run(c.method, func(t *testing.T) {
			o := start(t, replaysafetest.Config{})
			edge := startProxy(t, connectproxy.Config{Forward: true, Upstream: &connectproxy.Upstream{Addr: sq.Open.Addr()},
				Conns: []connectproxy.Script{{CloseAfterForwarding: 2}}})
			tr, obs := forwardProxied(t, o, edge, replaysafe.Options{})
			get(t, tr, o, "/warm")
			code, _, err := roundTrip(tr, newRequest(t, t.Context(), c.method, o.URL()+"/target", c.body))
			got := wantCopies(t, o, "/target", c.copies)
			if c.copies == 2 {
				if err != nil || code != 200 {
					t.Fatalf("GET: %d %v", code, err)
				}
				if atts := obs.attemptsFor("/target"); len(atts) != 2 || atts[0].Decision.Rule != fsm.RuleAmbiguousIdempotentResend {
					t.Errorf("attempts %+v, want a resend by RS20", atts)
				}
				if string(got[0].Body) != string(got[1].Body) || got[0].Method != got[1].Method || got[0].Target != got[1].Target {
					t.Errorf("copies differ: %+v, %+v", got[0], got[1])
				}
			} else {
				wantRule(t, err, fsm.RuleAmbiguousNotIdempotent, 1)
			}
		})
	}
}
