package conformance

import (
	"net/http"
	"net/url"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
)

// Proxy scenarios run both clients through one scripted CONNECT proxy
// (replaysafetest/connectproxy), started fresh for every run:
// replaysafe with Options.Proxy, net/http with Transport.Proxy, both set
// to http.ProxyURL of the proxy, both dialing through the run's Dialer.
//
// They run over TLS only: net/http tunnels with CONNECT only to https
// origins (to an http origin it sends absolute-form requests, which a
// CONNECT proxy refuses), while replaysafe always tunnels, so only an
// https origin puts both clients on the same wire path.

// ProxyNetworks are the networks proxy scenarios run over.
var ProxyNetworks = []Network{
	{Name: "tls", TLS: true, Close: replaysafetest.CloseFIN},
}

// tunnelCutAfter is the proxy's idle cut in the tunnel-cut scenarios:
// long enough for the target request to reach the origin before it,
// even under the race detector, and short enough to keep runs quick.
const tunnelCutAfter = 400 * time.Millisecond

// tunnelCut scripts the origin for a request crossing an idle tunnel cut:
// connection 0 answers the warm-up and never answers the target, so the
// proxy cuts the idle tunnel while the target is at the origin, before
// any response byte; later connections answer.
func tunnelCut(*Env) []replaysafetest.ConnScript {
	return []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.OK(), replaysafetest.Hang(0)),
		replaysafetest.Script(replaysafetest.OK()),
	}
}

// answer scripts every connection to answer every request.
func answer(*Env) []replaysafetest.ConnScript {
	return []replaysafetest.ConnScript{replaysafetest.Script(replaysafetest.OK())}
}

// proxyScenarios are the proxy rows of the table.
//
// Counts: in the tunnel cuts the target reached the origin through the
// first tunnel before the cut, so a resend on a new tunnel makes two
// copies. The connection was reused and no response byte came, so both
// clients resend a GET (replaysafe by RS20, net/http because it reads an
// EOF on a reused connection as the server closing an idle one) and
// neither resends a POST (RS18): one copy and an error. A PUT is
// idempotent (RFC 9110 §9.2.2) and its body buffered: replaysafe resends
// it (two copies), net/http replays only GET, HEAD, OPTIONS and TRACE
// without a key (one copy, an error). A cut the client saw before the
// next request sends that request once on a new tunnel. A 407 fails the
// acquisition (RS04): the origin sees nothing.
func proxyScenarios() []Scenario {
	cut := func(*Env) connectproxy.Config { return connectproxy.Config{IdleCut: tunnelCutAfter} }
	return []Scenario{
		{
			ID: "proxy-get-tunnel-cut", Title: "GET through a CONNECT proxy, idle tunnel cut crosses the request",
			Networks: ProxyNetworks, Proxy: cut,
			Script: tunnelCut, Run: warmThen(http.MethodGet, NoBody),
			Want: same(Want{ok200, "RS20,RS02", 2}, Want{ok200, "", 2}),
		},
		{
			ID: "proxy-post-tunnel-cut", Title: "POST through a CONNECT proxy, idle tunnel cut crosses it",
			Networks: ProxyNetworks, Proxy: cut,
			Script: tunnelCut, Run: warmThen(http.MethodPost, Buffered),
			Want: same(Want{fails, "RS18", 1}, Want{fails, "", 1}),
		},
		{
			ID: "proxy-put-tunnel-cut", Title: "PUT through a CONNECT proxy, idle tunnel cut crosses it",
			Networks: ProxyNetworks, Proxy: cut,
			Script: tunnelCut, Run: warmThen(http.MethodPut, Buffered),
			Want: same(Want{ok200, "RS20,RS02", 2}, Want{fails, "", 1}),
		},
		{
			ID: "proxy-get-tunnel-cut-seen", Title: "GET through a CONNECT proxy after an idle tunnel cut the client saw",
			Networks: ProxyNetworks, Proxy: cut,
			Script: answer, Run: idleThen(true, http.MethodGet, NoBody),
			Want: same(Want{ok200, "RS02", 1}, Want{ok200, "", 1}),
		},
		{
			ID: "proxy-407", Title: "GET through a CONNECT proxy that answers 407",
			Networks: ProxyNetworks,
			Proxy: func(*Env) connectproxy.Config {
				return connectproxy.Config{RequireAuth: &connectproxy.Credentials{Username: "u", Password: "p"}}
			},
			Script: answer,
			Run: func(env *Env) (Result, error) {
				return env.Target(http.MethodGet, NoBody), nil
			},
			Want: same(Want{fails, "RS04", 0}, Want{fails, "", 0}),
		},
	}
}

// startProxy starts the scenario's proxy, if it has one.
func (e *Env) startProxy(s Scenario) error {
	if s.Proxy == nil {
		return nil
	}
	p, err := connectproxy.Start(s.Proxy(e))
	if err != nil {
		return err
	}
	e.Proxy = p
	return nil
}

// stopProxy closes the run's proxy, if any.
func (e *Env) stopProxy() {
	if e.Proxy != nil {
		e.Proxy.Close()
	}
}

// proxyFunc returns the Proxy setting both clients get: http.ProxyURL of
// the run's proxy, or nil without one.
func (e *Env) proxyFunc() func(*http.Request) (*url.URL, error) {
	if e.Proxy == nil {
		return nil
	}
	return http.ProxyURL(&url.URL{Scheme: "http", Host: e.Proxy.Addr()})
}
