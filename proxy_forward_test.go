package replaysafe_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
)

// forwardProxied returns a Transport whose http:// calls go to the
// forward proxy p in absolute form (the default), and what its Observer
// saw.
func forwardProxied(t *testing.T, s *replaysafetest.Server, p *connectproxy.Server, o replaysafe.Options) (*replaysafe.Transport, *observed) {
	t.Helper()
	u := mustURL(t, p.URL())
	o.Proxy = func(*http.Request) (*url.URL, error) { return u, nil }
	return client(t, s, o)
}

// TestProxyAbsoluteForm: plain http through an HTTP proxy goes in
// absolute form, as net/http sends it: GET, POST and PUT to two origins
// share one proxy connection, each reaches its origin once, the proxy
// sees absolute-form targets and the route's credentials (Basic
// Proxy-Authorization on every request), and the origin never sees
// Proxy-Authorization, not even one the caller set.
func TestProxyAbsoluteForm(t *testing.T) {
	a := start(t, replaysafetest.Config{})
	b := start(t, replaysafetest.Config{})
	creds := &connectproxy.Credentials{Username: "u", Password: "secret"}
	p := startProxy(t, connectproxy.Config{Forward: true, RequireAuth: creds})
	pu := mustURL(t, p.URL())
	pu.User = url.UserPassword("u", "secret")
	tr, _ := client(t, a, replaysafe.Options{Proxy: func(*http.Request) (*url.URL, error) { return pu, nil }})

	for _, c := range []struct {
		srv          *replaysafetest.Server
		method, path string
		body         string
	}{
		{a, "GET", "/get", ""},
		{a, "POST", "/post", "payload"},
		{b, "PUT", "/put", "other"},
	} {
		req := newRequest(t, t.Context(), c.method, c.srv.URL()+c.path, c.body, "Proxy-Authorization", "Basic leak")
		code, body, err := roundTrip(tr, req)
		if err != nil || code != 200 || body != "ok" {
			t.Fatalf("%s %s: %d %q %v", c.method, c.path, code, body, err)
		}
		got := wantCopies(t, c.srv, c.path, 1)
		if string(got[0].Body) != c.body {
			t.Errorf("%s: origin got body %q", c.path, got[0].Body)
		}
		if v, ok := got[0].Header["Proxy-Authorization"]; ok {
			t.Errorf("%s: origin received Proxy-Authorization %q", c.path, v)
		}
	}
	reqs := p.Requests()
	if len(reqs) != 3 || p.Conns() != 1 {
		t.Fatalf("proxy saw %d requests on %d connections, want 3 on 1", len(reqs), p.Conns())
	}
	for _, r := range reqs {
		if !strings.HasPrefix(r.Target, "http://127.0.0.1:") || r.Header.Get("Proxy-Authorization") != "Basic dTpzZWNyZXQ=" {
			t.Errorf("proxy saw %s %s with Proxy-Authorization %q, want absolute form and the route's credentials", r.Method, r.Target, r.Header.Get("Proxy-Authorization"))
		}
	}
	if n := p.Tunnels(); n != 0 {
		t.Errorf("%d CONNECT tunnels for plain http", n)
	}
}

// TestProxyAbsoluteFormCrossing: the client↔proxy connection is the one
// whose staleness the rules judge. The proxy forwards the second request
// on a kept-alive connection to the origin, then closes without
// answering: the origin processed it, the client saw no response byte. A
// GET is resent once on a new proxy connection (RS20: two identical
// copies at the origin); a POST is not (RS18: one copy). When the proxy
// closes as the request arrives, unforwarded, the GET's resend is the
// origin's only copy, and the POST reaches it not at all.
func TestProxyAbsoluteFormCrossing(t *testing.T) {
	for _, c := range []struct {
		name         string
		script       connectproxy.Script
		method, body string
		copies       int
		rule         fsm.Rule // of attempt 1 when the call fails, else of the resend
		ok           bool
	}{
		{"forwarded GET", connectproxy.Script{CloseAfterForwarding: 2}, "GET", "", 2, fsm.RuleAmbiguousIdempotentResend, true},
		{"forwarded POST", connectproxy.Script{CloseAfterForwarding: 2}, "POST", "pay", 1, fsm.RuleAmbiguousNotIdempotent, false},
		{"unforwarded GET", connectproxy.Script{CloseBeforeForwarding: 2}, "GET", "", 1, fsm.RuleAmbiguousIdempotentResend, true},
		{"unforwarded POST", connectproxy.Script{CloseBeforeForwarding: 2}, "POST", "pay", 0, fsm.RuleAmbiguousNotIdempotent, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := start(t, replaysafetest.Config{})
			p := startProxy(t, connectproxy.Config{Forward: true, Conns: []connectproxy.Script{c.script}})
			tr, obs := forwardProxied(t, s, p, replaysafe.Options{})
			get(t, tr, s, "/warm")
			code, _, err := roundTrip(tr, newRequest(t, t.Context(), c.method, s.URL()+"/target", c.body))
			got := wantCopies(t, s, "/target", c.copies)
			atts := obs.attemptsFor("/target")
			if c.ok {
				if err != nil || code != 200 {
					t.Fatalf("%s: %d %v", c.method, code, err)
				}
				if len(atts) != 2 || atts[0].Decision.Rule != c.rule || !atts[0].Reused || atts[1].Reused {
					t.Fatalf("attempts %+v, want a resend by %s from a reused proxy connection to a new one", atts, c.rule)
				}
				if len(got) == 2 && string(got[0].Raw) != string(got[1].Raw) {
					t.Errorf("copies differ:\n%q\n%q", got[0].Raw, got[1].Raw)
				}
			} else {
				wantRule(t, err, c.rule, 1)
			}
			if n := p.Conns(); n != 1+len(atts)-1 {
				t.Errorf("%d proxy connections for %d attempts after the warm-up", n, len(atts))
			}
		})
	}
}

// TestProxyAbsoluteForm502IsAResponse: a proxy that cannot reach the
// origin answers 502; in absolute form that is the response to the
// request, delivered as it is and never resent.
func TestProxyAbsoluteForm502IsAResponse(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	addr := s.Addr()
	s.Close() // the origin is gone: the proxy's dial fails
	p := startProxy(t, connectproxy.Config{Forward: true})
	tr, obs := forwardProxied(t, s, p, replaysafe.Options{})
	code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", "http://"+addr+"/gone", ""))
	if err != nil || code != http.StatusBadGateway {
		t.Fatalf("GET: %d %v, want the proxy's 502", code, err)
	}
	if reqs := p.Requests(); len(reqs) != 1 {
		t.Errorf("proxy saw %d requests, want 1: %+v", len(reqs), reqs)
	}
	if atts := obs.attemptsFor("/gone"); len(atts) != 1 || atts[0].Decision.Action != fsm.ActionDeliver {
		t.Errorf("attempts %+v, want one delivered", atts)
	}
}

// TestProxyConnectPlainHTTPOption: ProxyConnectPlainHTTP tunnels plain
// http with CONNECT instead: one tunnel, origin-form inside it.
func TestProxyConnectPlainHTTPOption(t *testing.T) {
	s := start(t, replaysafetest.Config{})
	p := startProxy(t, connectproxy.Config{Forward: true})
	tr, _ := forwardProxied(t, s, p, replaysafe.Options{ProxyConnectPlainHTTP: true})
	get(t, tr, s, "/a")
	reqs := p.Requests()
	if len(reqs) != 1 || reqs[0].Method != http.MethodConnect || p.Tunnels() != 1 {
		t.Fatalf("proxy saw %+v with %d tunnels, want one CONNECT", reqs, p.Tunnels())
	}
	if got := wantCopies(t, s, "/a", 1); !strings.HasPrefix(string(got[0].Raw), "GET /a HTTP/1.1") {
		t.Errorf("origin got %q, want origin form", got[0].Raw)
	}
}
