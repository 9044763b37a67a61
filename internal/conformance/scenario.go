package conformance

import (
	"net/http"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
)

// Network is the transport a case runs over and how its server closes
// connections.
type Network struct {
	// Name is the suffix of the case name: tcp, tcp-rst, tls, tls-abrupt.
	Name string
	// TLS makes the server and client speak TLS.
	TLS bool
	// Close is how the server closes connections: CloseFIN (over TLS a
	// close_notify first), CloseFINNoNotify (TLS cut without
	// close_notify) or CloseRST.
	Close replaysafetest.CloseMode
}

// Networks are the networks every scenario runs over.
var Networks = []Network{
	{Name: "tcp", Close: replaysafetest.CloseFIN},
	{Name: "tcp-rst", Close: replaysafetest.CloseRST},
	{Name: "tls", TLS: true, Close: replaysafetest.CloseFIN},
	{Name: "tls-abrupt", TLS: true, Close: replaysafetest.CloseFINNoNotify},
}

// Want is the expected outcome of every run of a case for one client.
type Want struct {
	// Status is the final status, or 0 for an error.
	Status int `json:"status"`
	// Rules lists, for replaysafe, the rule ID that ended each wire
	// attempt, joined by ","; for example "RS20,RS02" for a resend that
	// delivered. Empty for net/http.
	Rules string `json:"rules,omitempty"`
	// Copies is the number of complete copies of the target request the
	// server received.
	Copies int `json:"copies"`
}

// Scenario is one fault, scripted at the server and driven at the
// client.
type Scenario struct {
	// ID names the scenario in case names ("get-crossing").
	ID string
	// Title says what happens, in words.
	Title string
	// Script returns the server's connection scripts for env.
	Script func(env *Env) []replaysafetest.ConnScript
	// Options adjusts replaysafe's options; net/http has no equivalent
	// setting, so a scenario with Options is run against replaysafe only.
	Options func(*replaysafe.Options)
	// Run drives the client and returns the target request's result.
	Run func(env *Env) (Result, error)
	// Want returns the expected outcomes over n, for replaysafe and for
	// net/http (the latter documents net/http's behaviour).
	Want func(n Network) (replaysafe, nethttp Want)
	// Networks, if set, replaces Networks for this scenario.
	Networks []Network
	// Proxy, if set, configures a CONNECT proxy both clients go through
	// (proxy.go).
	Proxy func(env *Env) connectproxy.Config
}

// Case is a scenario over one network.
type Case struct {
	Scenario
	Network Network
}

// Name is "scenario-id/network".
func (c Case) Name() string { return c.ID + "/" + c.Network.Name }

// Cases returns every scenario over every network.
func Cases() []Case {
	var cs []Case
	for _, s := range Scenarios() {
		nets := Networks
		if s.Networks != nil {
			nets = s.Networks
		}
		for _, n := range nets {
			cs = append(cs, Case{Scenario: s, Network: n})
		}
	}
	return cs
}

// Statuses in expectations: 200, or 0 for an error.
const (
	ok200 = http.StatusOK
	fails = 0
)

// same returns a Want function with the same expectation on every network.
func same(rs, std Want) func(Network) (Want, Want) {
	return func(Network) (Want, Want) { return rs, std }
}

// crossing scripts a close crossing the second request on connection 0;
// later connections answer.
func crossing(env *Env) []replaysafetest.ConnScript {
	return []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(env.CloseMode())),
		replaysafetest.Script(replaysafetest.OK()),
	}
}

// afterWarm scripts connection 0 to answer the warm-up request and then do
// a with the target.
func afterWarm(a func(replaysafetest.CloseMode) replaysafetest.Action) func(env *Env) []replaysafetest.ConnScript {
	return func(env *Env) []replaysafetest.ConnScript {
		return []replaysafetest.ConnScript{
			replaysafetest.Script(replaysafetest.OK(), a(env.CloseMode())),
			replaysafetest.Script(replaysafetest.OK()),
		}
	}
}

// idleClose scripts connection 0 to answer the warm-up and close when the
// scenario signals.
func idleClose(env *Env) []replaysafetest.ConnScript {
	return []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.IdleCloseOn(env.Signal, env.CloseMode())),
		replaysafetest.Script(replaysafetest.OK()),
	}
}

// warmThen warms connection 0 up and sends the target.
func warmThen(method string, body Body, header ...string) func(env *Env) (Result, error) {
	return func(env *Env) (Result, error) {
		if err := env.Warm("/warm"); err != nil {
			return Result{}, err
		}
		return env.Target(method, body, header...), nil
	}
}

// Scenarios returns the fault scenarios, in table order.
func Scenarios() []Scenario {
	return append([]Scenario{
		{
			ID: "get-crossing", Title: "GET, close crosses the request",
			Script: crossing, Run: warmThen(http.MethodGet, NoBody),
			Want: same(Want{ok200, "RS20,RS02", 2}, Want{ok200, "", 2}),
		},
		{
			ID: "post-key-crossing", Title: "POST with Idempotency-Key, close crosses it",
			Script: crossing, Run: warmThen(http.MethodPost, Buffered, "Idempotency-Key", "k-1"),
			Want: same(Want{ok200, "RS20,RS02", 2}, Want{ok200, "", 2}),
		},
		{
			ID: "post-crossing", Title: "POST, close crosses it",
			Script: crossing, Run: warmThen(http.MethodPost, Buffered),
			Want: same(Want{fails, "RS18", 1}, Want{fails, "", 1}),
		},
		{
			ID: "put-crossing", Title: "PUT, close crosses it",
			Script: crossing, Run: warmThen(http.MethodPut, Buffered),
			Want: same(Want{ok200, "RS20,RS02", 2}, Want{fails, "", 1}),
		},
		{
			ID: "delete-crossing", Title: "DELETE, close crosses it",
			Script: crossing, Run: warmThen(http.MethodDelete, NoBody),
			Want: same(Want{ok200, "RS20,RS02", 2}, Want{fails, "", 1}),
		},
		{
			ID: "get-idle-seen", Title: "GET after an idle close the client saw",
			Script: idleClose, Run: idleThen(true, http.MethodGet, NoBody),
			Want: same(Want{ok200, "RS02", 1}, Want{ok200, "", 1}),
		},
		{
			ID: "post-idle-seen", Title: "POST after an idle close the client saw",
			Script: idleClose, Run: idleThen(true, http.MethodPost, Buffered),
			Want: same(Want{ok200, "RS02", 1}, Want{ok200, "", 1}),
		},
		{
			ID: "get-idle-in-flight", Title: "GET after an idle close still in flight",
			Script: idleClose, Run: idleThen(false, http.MethodGet, NoBody),
			Want: func(n Network) (Want, Want) {
				if n.Close == replaysafetest.CloseRST {
					return Want{ok200, "RS16,RS02", 1}, Want{ok200, "", 1}
				}
				return Want{ok200, "RS20,RS02", 1}, Want{ok200, "", 1}
			},
		},
		{
			ID: "post-idle-in-flight", Title: "POST after an idle close still in flight",
			Script: idleClose, Run: idleThen(false, http.MethodPost, Buffered),
			Want: func(n Network) (Want, Want) {
				if n.Close == replaysafetest.CloseRST {
					return Want{ok200, "RS16,RS02", 1}, Want{ok200, "", 1}
				}
				return Want{fails, "RS18", 0}, Want{fails, "", 0}
			},
		},
		{
			ID: "oneshot-post-idle-in-flight", Title: "POST with a one-shot body after an idle close still in flight",
			Script: idleClose, Run: idleThen(false, http.MethodPost, OneShot),
			Want: func(n Network) (Want, Want) {
				if n.Close == replaysafetest.CloseRST {
					return Want{ok200, "RS16,RS02", 1}, Want{fails, "", 0}
				}
				return Want{fails, "RS18", 0}, Want{fails, "", 0}
			},
		},
		{
			ID: "two-stale", Title: "GET, two stale connections in the pool",
			Script: func(env *Env) []replaysafetest.ConnScript {
				return []replaysafetest.ConnScript{
					replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(env.CloseMode())),
					replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(env.CloseMode())),
					replaysafetest.Script(replaysafetest.OK()),
				}
			},
			Run:  twoStale,
			Want: same(Want{ok200, "RS20,RS02", 2}, Want{ok200, "", 3}),
		},
		{
			ID: "resend-fails", Title: "GET, the resend's new connection fails too",
			Script: func(env *Env) []replaysafetest.ConnScript {
				return []replaysafetest.ConnScript{
					replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(env.CloseMode())),
					replaysafetest.Script(replaysafetest.Drop(env.CloseMode())),
					replaysafetest.Script(replaysafetest.OK()),
				}
			},
			Run:  warmThen(http.MethodGet, NoBody),
			Want: same(Want{fails, "RS20,RS08", 2}, Want{fails, "", 2}),
		},
		{
			ID: "fresh-fails", Title: "GET, a fresh connection fails",
			Script: func(env *Env) []replaysafetest.ConnScript {
				return []replaysafetest.ConnScript{
					replaysafetest.Script(replaysafetest.Drop(env.CloseMode())),
					replaysafetest.Script(replaysafetest.OK()),
				}
			},
			Run: func(env *Env) (Result, error) {
				return env.Target(http.MethodGet, NoBody), nil
			},
			Want: same(Want{fails, "RS17", 1}, Want{fails, "", 1}),
		},
		{
			ID: "partial-status", Title: "GET, partial status line, then close",
			Script: afterWarm(replaysafetest.PartialStatus), Run: warmThen(http.MethodGet, NoBody),
			Want: same(Want{fails, "RS07", 1}, Want{fails, "", 1}),
		},
		{
			ID: "malformed", Title: "GET, malformed response, then close",
			Script: afterWarm(replaysafetest.Malformed), Run: warmThen(http.MethodGet, NoBody),
			Want: same(Want{fails, "RS07", 1}, Want{fails, "", 1}),
		},
		{
			ID: "interim-100", Title: "GET, 100 Continue, then close",
			Script: afterWarm(replaysafetest.Interim100), Run: warmThen(http.MethodGet, NoBody),
			Want: same(Want{fails, "RS07", 1}, Want{fails, "", 1}),
		},
		{
			ID: "interim-103", Title: "GET, 103 Early Hints, then close",
			Script: afterWarm(replaysafetest.EarlyHints), Run: warmThen(http.MethodGet, NoBody),
			Want: same(Want{fails, "RS07", 1}, Want{fails, "", 1}),
		},
		{
			ID: "timeout", Title: "GET, deadline passes waiting for the response",
			Script: afterWarm(func(replaysafetest.CloseMode) replaysafetest.Action { return replaysafetest.Hang(0) }),
			Run: func(env *Env) (Result, error) {
				if err := env.Warm("/warm"); err != nil {
					return Result{}, err
				}
				return env.Expire(http.MethodGet, NoBody), nil
			},
			Want: same(Want{fails, "RS06", 1}, Want{fails, "", 1}),
		},
		{
			ID: "canceled", Title: "GET, canceled waiting for the response",
			Script: afterWarm(func(replaysafetest.CloseMode) replaysafetest.Action { return replaysafetest.Hang(0) }),
			Run: func(env *Env) (Result, error) {
				if err := env.Warm("/warm"); err != nil {
					return Result{}, err
				}
				return env.Cancel(http.MethodGet, NoBody), nil
			},
			Want: same(Want{fails, "RS05", 1}, Want{fails, "", 1}),
		},
		{
			ID: "oneshot-put-crossing", Title: "PUT with a one-shot body, close crosses it",
			Script: crossing, Run: warmThen(http.MethodPut, OneShot),
			Want: same(Want{fails, "RS19", 1}, Want{fails, "", 1}),
		},
		{
			ID: "resend-off", Title: "GET, close crosses it, resending switched off",
			Script:  crossing,
			Options: func(o *replaysafe.Options) { o.DisableResend = true },
			Run:     warmThen(http.MethodGet, NoBody),
			Want:    same(Want{fails, "RS09", 1}, Want{}),
		},
		{
			ID: "retry-policy", Title: "GET, close crosses it, caller has a retry policy",
			Script:  crossing,
			Options: func(o *replaysafe.Options) { o.RetryPolicy = true },
			Run:     warmThen(http.MethodGet, NoBody),
			Want:    same(Want{fails, "RS10", 1}, Want{}),
		},
	}, proxyScenarios()...)
}

// idleThen warms connection 0 up, has the server close it while idle
// (seen by the client, or still in flight), and sends the target.
func idleThen(seen bool, method string, body Body) func(env *Env) (Result, error) {
	return func(env *Env) (Result, error) {
		if err := env.Warm("/warm"); err != nil {
			return Result{}, err
		}
		var err error
		if seen {
			err = env.IdleCloseSeen()
		} else {
			err = env.IdleCloseInFlight()
		}
		if err != nil {
			return Result{}, err
		}
		return env.Target(method, body), nil
	}
}

// twoStale leaves two kept-alive connections in the client's pool, both
// scripted to close when their next request arrives, and sends the
// target.
func twoStale(env *Env) (Result, error) {
	a, err := env.Hold("/a")
	if err != nil {
		return Result{}, err
	}
	b, err := env.Hold("/b")
	if err != nil {
		a.Body.Close()
		return Result{}, err
	}
	errA, errB := finish(a), finish(b)
	if errA != nil {
		return Result{}, errA
	}
	if errB != nil {
		return Result{}, errB
	}
	return env.Target(http.MethodGet, NoBody), nil
}
