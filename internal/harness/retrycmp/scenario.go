package retrycmp

import (
	"net/http"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest"
)

// Paths of the two requests a run sends.
const (
	// warmPath is the warm-up request that leaves a kept-alive connection
	// in the client's pool.
	warmPath = "/warm"
	// targetPath is the request whose copies a run counts.
	targetPath = "/target"
)

// payload is the body of every request that has one.
var payload = []byte("charge card 4242, order 16")

// scenario is one scripted fault of the comparison. Its server runs
// conns (connection i gets conns[i]) and rest beyond them.
type scenario struct {
	// id names the scenario in the tables.
	id string
	// letter names the scenario in the comparison list: a to f.
	letter string
	// title says what happens, in a few words.
	title string
	// method and body describe the target request.
	method string
	body   BodyKind
	// warm sends GET warmPath first, so that the target goes out on a
	// reused keep-alive connection.
	warm bool
	// conns script the connections in accept order; rest scripts the
	// ones beyond.
	conns func() []replaysafetest.ConnScript
	rest  func() replaysafetest.ConnScript
	// load marks the multiplied-load row: one run per client, the call
	// bounded by the load window instead of callTimeout.
	load bool
}

// sideEffect reports whether a second copy of the target duplicates a side
// effect: the method is not idempotent (RFC 9110 §9.2.2) and the request
// carries no idempotency key.
func (s scenario) sideEffect() bool {
	return s.method == http.MethodPost
}

// config returns the server's configuration for one run.
func (s scenario) config() replaysafetest.Config {
	rest := s.rest()
	cfg := replaysafetest.Config{Default: &rest, ReadTimeout: serverTimeout, WriteTimeout: serverTimeout}
	if s.conns != nil {
		cfg.Conns = s.conns()
	}
	return cfg
}

// serverTimeout bounds each read and write of a scenario's server: far
// above any loopback exchange, far below the defaults, so a stuck run
// ends soon.
const serverTimeout = 5 * time.Second

// Connection scripts the scenarios share.
var (
	// okScript answers 200 to every request.
	okScript = func() replaysafetest.ConnScript { return replaysafetest.ConnScript{} }
	// crossing answers the warm-up, then reads the target in full,
	// records it and closes the connection without answering: the
	// request was processed and the client cannot know it.
	crossing = func() []replaysafetest.ConnScript {
		return []replaysafetest.ConnScript{replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN))}
	}
	// unavailableOnce answers the first request 503 (no Retry-After) and
	// every later one 200.
	unavailableOnce = func() []replaysafetest.ConnScript {
		return []replaysafetest.ConnScript{replaysafetest.Script(unavailable())}
	}
)

func unavailable() replaysafetest.Action {
	return replaysafetest.Respond(http.StatusServiceUnavailable, "unavailable")
}

// scenarios are the rows, in table order.
var scenarios = []scenario{
	{
		id: "post-crossing", letter: "a", title: "POST, close crosses it on a reused connection",
		method: http.MethodPost, body: BodyBuffered, warm: true, conns: crossing, rest: okScript,
	},
	{
		id: "post-503", letter: "b", title: "POST answered 503, then 200",
		method: http.MethodPost, body: BodyBuffered, conns: unavailableOnce, rest: okScript,
	},
	{
		id: "put-crossing", letter: "c", title: "PUT, close crosses it on a reused connection",
		method: http.MethodPut, body: BodyBuffered, warm: true, conns: crossing, rest: okScript,
	},
	{
		id: "get-retry-after", letter: "d", title: "GET answered 503 with Retry-After: 2, then 200",
		method: http.MethodGet, body: BodyNone, rest: okScript,
		conns: func() []replaysafetest.ConnScript {
			return []replaysafetest.ConnScript{replaysafetest.Script(unavailable().WithHeader("Retry-After", "2"))}
		},
	},
	{
		id: "get-fail-all", letter: "e", title: "GET, every request answered 503: copies of one call within the window",
		method: http.MethodGet, body: BodyNone, load: true,
		rest: func() replaysafetest.ConnScript {
			a := unavailable()
			return replaysafetest.ConnScript{Default: &a}
		},
	},
	{
		id: "oneshot-post-503", letter: "f", title: "POST with a one-shot body answered 503, then 200",
		method: http.MethodPost, body: BodyOneShot, conns: unavailableOnce, rest: okScript,
	},
	{
		id: "oneshot-post-crossing", letter: "f", title: "POST with a one-shot body, close crosses it on a reused connection",
		method: http.MethodPost, body: BodyOneShot, warm: true, conns: crossing, rest: okScript,
	},
}
