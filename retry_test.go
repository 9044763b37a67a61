package replaysafe_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// always scripts every request on every connection with a.
func always(a replaysafetest.Action) replaysafetest.Config {
	return replaysafetest.Config{Default: &replaysafetest.ConnScript{Default: &a}}
}

// quick is a retry policy whose waits are too short to matter.
var quick = replaysafe.Retry{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}

// wantCalls checks how the call went on after each attempt for path.
func wantCalls(t *testing.T, obs *observed, path string, want ...fsm.Rule) {
	t.Helper()
	as := obs.attemptsFor(path)
	if len(as) != len(want) {
		t.Fatalf("%d attempts for %s, want %d", len(as), path, len(want))
	}
	for i, a := range as {
		if a.Call.Rule != want[i] || a.Number != i+1 {
			t.Errorf("after attempt %d (number %d) the call went on by %v, want %s %v", i+1, a.Number, a.Call, want[i].ID(), want[i])
		}
	}
}

func TestRetryStatus(t *testing.T) {
	cases := []struct {
		name, method, body string
		hdr                []string
		copies             int
		status             int
		calls              []fsm.Rule
	}{
		{"GET is retried until 200", "GET", "", nil, 3, 200,
			[]fsm.Rule{fsm.RuleRetryStatus, fsm.RuleRetryStatus, fsm.RuleDeliverFinalResponse}},
		{"a keyed POST with a buffered body is retried", "POST", "pay 10", []string{"Idempotency-Key", "k1"}, 3, 200,
			[]fsm.Rule{fsm.RuleRetryStatus, fsm.RuleRetryStatus, fsm.RuleDeliverFinalResponse}},
		{"a POST without a key gets its 503", "POST", "pay 10", nil, 1, 503,
			[]fsm.Rule{fsm.RuleDeliverFinalResponse}},
		{"a one-shot PUT gets its 503", "PUT", "oneshot:v=1", nil, 1, 503,
			[]fsm.Rule{fsm.RuleDeliverFinalResponse}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(
				replaysafetest.Respond(503, "busy"), replaysafetest.Respond(503, "busy"), replaysafetest.OK())}})
			tr, obs := client(t, s, replaysafe.Options{Retry: quick})
			code, _, err := roundTrip(tr, newRequest(t, t.Context(), tc.method, s.URL()+"/r", tc.body, tc.hdr...))
			if err != nil || code != tc.status {
				t.Fatalf("got %d %v, want %d", code, err, tc.status)
			}
			wantCopies(t, s, "/r", tc.copies)
			wantCalls(t, obs, "/r", tc.calls...)
		})
	}
}

func TestRetryStatusExhausted(t *testing.T) {
	s := start(t, always(replaysafetest.Respond(502, "bad gateway")))
	tr, obs := client(t, s, replaysafe.Options{Retry: quick})
	code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/r", ""))
	if err != nil || code != 502 || body != "bad gateway" {
		t.Fatalf("got %d %q %v, want the third 502", code, body, err)
	}
	wantCopies(t, s, "/r", 3)
	wantCalls(t, obs, "/r", fsm.RuleRetryStatus, fsm.RuleRetryStatus, fsm.RuleRetryExhausted)
}

func TestRetryAfter(t *testing.T) {
	t.Run("honoured", func(t *testing.T) {
		s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(
			replaysafetest.Respond(503, "later").WithHeader("Retry-After", "1"), replaysafetest.OK())}})
		tr, obs := client(t, s, replaysafe.Options{Retry: quick})
		begin := time.Now()
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/r", ""))
		if err != nil || code != 200 {
			t.Fatalf("got %d %v", code, err)
		}
		if waited := time.Since(begin); waited < time.Second {
			t.Errorf("the retry came after %v, before the Retry-After of 1s", waited)
		}
		wantCopies(t, s, "/r", 2)
		if as := obs.attemptsFor("/r"); len(as) == 0 || as[0].Call.Delay != time.Second {
			t.Fatalf("reports %+v, want a first decision waiting 1s", as)
		}
	})
	t.Run("too long", func(t *testing.T) {
		s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(
			replaysafetest.Respond(429, "slow down").WithHeader("Retry-After", "3600"), replaysafetest.OK())}})
		tr, obs := client(t, s, replaysafe.Options{Retry: quick})
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/r", ""))
		if err != nil || code != 429 {
			t.Fatalf("got %d %v, want the 429 delivered", code, err)
		}
		wantCopies(t, s, "/r", 1)
		wantCalls(t, obs, "/r", fsm.RuleRetryAfterTooLong)
	})
	t.Run("canceled while waiting", func(t *testing.T) {
		s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(
			replaysafetest.Respond(503, "later").WithHeader("Retry-After", "5"), replaysafetest.OK())}})
		tr, _ := client(t, s, replaysafe.Options{Retry: quick})
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, _, err := roundTrip(tr, newRequest(t, ctx, "GET", s.URL()+"/r", ""))
		e := wantRule(t, err, fsm.RuleCanceled, 1)
		if !errors.Is(err, context.DeadlineExceeded) || len(e.History) != 1 || e.History[0].Rule != fsm.RuleRetryStatus {
			t.Errorf("error %v, history %v: want the deadline and the retry it cut", err, e.History)
		}
		wantCopies(t, s, "/r", 1)
	})
}

// failFirstDials returns a DialContext whose first n dials fail as a
// refused connection would.
func failFirstDials(n int32) func(context.Context, string, string) (net.Conn, error) {
	var dials atomic.Int32
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) <= n {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		return d.DialContext(ctx, network, addr)
	}
}

func TestRetryAcquire(t *testing.T) {
	t.Run("a one-shot POST is retried when nothing was sent", func(t *testing.T) {
		s := start(t, replaysafetest.Config{})
		tr, obs := client(t, s, replaysafe.Options{Retry: quick, DialContext: failFirstDials(2)})
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/r", "oneshot:pay 10"))
		if err != nil || code != 200 {
			t.Fatalf("got %d %v", code, err)
		}
		wantCopies(t, s, "/r", 1)
		wantCalls(t, obs, "/r", fsm.RuleRetryAcquire, fsm.RuleRetryAcquire, fsm.RuleDeliverFinalResponse)
	})
	t.Run("exhausted", func(t *testing.T) {
		s := start(t, replaysafetest.Config{})
		tr, _ := client(t, s, replaysafe.Options{Retry: quick, DialContext: failFirstDials(3)})
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/r", ""))
		e := wantRule(t, err, fsm.RuleRetryExhausted, 3)
		if !errors.Is(err, syscall.ECONNREFUSED) || len(e.History) != 3 {
			t.Errorf("error %v, history %v", err, e.History)
		}
		wantCopies(t, s, "/r", 0)
	})
	t.Run("without a policy a failed dial is the caller's", func(t *testing.T) {
		s := start(t, replaysafetest.Config{})
		tr, _ := client(t, s, replaysafe.Options{DialContext: failFirstDials(1)})
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/r", ""))
		wantRule(t, err, fsm.RuleAcquireFailed, 1)
		wantCopies(t, s, "/r", 0)
	})
}

func TestRetryAmbiguous(t *testing.T) {
	cut := replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.PartialStatus(replaysafetest.CloseFIN)),
		replaysafetest.Script(replaysafetest.OK()),
	}}
	t.Run("a GET whose response was cut is retried", func(t *testing.T) {
		s := start(t, cut)
		tr, obs := client(t, s, replaysafe.Options{Retry: quick})
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/r", ""))
		if err != nil || code != 200 {
			t.Fatalf("got %d %v", code, err)
		}
		wantCopies(t, s, "/r", 2)
		wantCalls(t, obs, "/r", fsm.RuleRetryAmbiguous, fsm.RuleDeliverFinalResponse)
	})
	t.Run("a POST whose response was cut is not", func(t *testing.T) {
		s := start(t, cut)
		tr, _ := client(t, s, replaysafe.Options{Retry: quick})
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/r", "pay 10"))
		wantRule(t, err, fsm.RuleResponseStarted, 1)
		wantCopies(t, s, "/r", 1)
	})
	t.Run("without a policy the GET fails", func(t *testing.T) {
		s := start(t, cut)
		tr, _ := client(t, s, replaysafe.Options{})
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/r", ""))
		wantRule(t, err, fsm.RuleResponseStarted, 1)
		wantCopies(t, s, "/r", 1)
	})
	t.Run("every response cut: exhausted after three copies", func(t *testing.T) {
		s := start(t, always(replaysafetest.PartialStatus(replaysafetest.CloseFIN)))
		tr, _ := client(t, s, replaysafe.Options{Retry: quick})
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/r", ""))
		e := wantRule(t, err, fsm.RuleRetryExhausted, 3)
		if len(e.History) != 3 || e.History[0].Rule != fsm.RuleRetryAmbiguous || !e.History[0].Retry {
			t.Errorf("history %v", e.History)
		}
		wantCopies(t, s, "/r", 3)
	})
}

// TestRetryCloseCrossing: a POST the server read in full before it closed
// is never sent again, whatever the policy; a PUT is resent by the
// automatic resend, which the policy counts.
func TestRetryCloseCrossing(t *testing.T) {
	for _, tc := range []struct {
		method string
		copies int
	}{{"POST", 1}, {"PUT", 2}} {
		t.Run(tc.method, func(t *testing.T) {
			s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
				replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)),
				replaysafetest.Script(replaysafetest.OK()),
			}})
			tr, obs := client(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 5, BaseDelay: time.Millisecond}})
			get(t, tr, s, "/warm")
			code, _, err := roundTrip(tr, newRequest(t, t.Context(), tc.method, s.URL()+"/r", "v=1"))
			wantCopies(t, s, "/r", tc.copies)
			if tc.method == "POST" {
				wantRule(t, err, fsm.RuleAmbiguousNotIdempotent, 1)
				return
			}
			if err != nil || code != 200 {
				t.Fatalf("got %d %v", code, err)
			}
			wantCalls(t, obs, "/r", fsm.RuleAmbiguousIdempotentResend, fsm.RuleDeliverFinalResponse)
		})
	}
}

func TestTooEarly(t *testing.T) {
	t.Run("retried once without a policy", func(t *testing.T) {
		s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(
			replaysafetest.Respond(425, "too early"), replaysafetest.Respond(201, "made"))}})
		tr, obs := client(t, s, replaysafe.Options{})
		code, body, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/r", "pay 10"))
		if err != nil || code != 201 || body != "made" {
			t.Fatalf("got %d %q %v", code, body, err)
		}
		wantCopies(t, s, "/r", 2)
		wantCalls(t, obs, "/r", fsm.RuleTooEarly, fsm.RuleDeliverFinalResponse)
	})
	t.Run("a second 425 is delivered", func(t *testing.T) {
		s := start(t, always(replaysafetest.Respond(425, "too early")))
		tr, _ := client(t, s, replaysafe.Options{Retry: quick})
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/r", "pay 10"))
		if err != nil || code != 425 {
			t.Fatalf("got %d %v", code, err)
		}
		wantCopies(t, s, "/r", 2)
	})
	t.Run("a one-shot body is not sent twice", func(t *testing.T) {
		s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(replaysafetest.Respond(425, "too early"))}})
		tr, _ := client(t, s, replaysafe.Options{})
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/r", "oneshot:pay 10"))
		if err != nil || code != 425 {
			t.Fatalf("got %d %v", code, err)
		}
		wantCopies(t, s, "/r", 1)
	})
}

// TestWithRetry: a request's own policy replaces the Transport's; one
// attempt switches the automatic resend off too.
func TestWithRetry(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)),
		replaysafetest.Script(replaysafetest.Respond(503, "busy"), replaysafetest.OK()),
	}})
	tr, _ := client(t, s, replaysafe.Options{Retry: quick})
	get(t, tr, s, "/warm")
	ctx := replaysafe.WithRetry(t.Context(), replaysafe.Retry{MaxAttempts: 1})
	_, _, err := roundTrip(tr, newRequest(t, ctx, "GET", s.URL()+"/once", ""))
	wantRule(t, err, fsm.RuleResendOff, 1)
	wantCopies(t, s, "/once", 1)

	ctx = replaysafe.WithRetry(t.Context(), replaysafe.Retry{})
	code, _, err := roundTrip(tr, newRequest(t, ctx, "GET", s.URL()+"/plain", ""))
	if err != nil || code != 503 {
		t.Fatalf("no policy for this request: got %d %v, want the 503", code, err)
	}
	wantCopies(t, s, "/plain", 1)
}

// TestRetryBudget: 64 goroutines against an upstream that fails every
// request: the retries stay within the budget's ratio of the calls plus
// its floor, counted at the server.
func TestRetryBudget(t *testing.T) {
	s := start(t, always(replaysafetest.Respond(503, "down")))
	budget := replaysafe.RetryBudget{Ratio: 0.2, MinPerSecond: 1, Window: 10 * time.Second}
	tr, _ := client(t, s, replaysafe.Options{MaxIdleConnsPerHost: 64,
		Retry: replaysafe.Retry{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, Budget: budget}})
	const workers, each = 64, 8
	var wg sync.WaitGroup
	var got503 atomic.Int32
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				req := newRequest(t, t.Context(), "GET", s.URL()+"/b", "")
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Errorf("worker %d call %d: %v", w, i, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 503 {
					got503.Add(1)
				}
			}
		})
	}
	wg.Wait()
	calls := workers * each
	bound := int(float64(calls)*(1+budget.Ratio)) + budget.MinPerSecond*int(budget.Window/time.Second)
	copies := len(copies(s, "/b"))
	t.Logf("%d calls, %d copies at the server (bound %d; without a budget up to %d)", calls, copies, bound, calls*5)
	if copies > bound || copies <= calls {
		t.Errorf("%d copies for %d calls: want more than the calls and at most %d", copies, calls, bound)
	}
	if int(got503.Load()) != calls {
		t.Errorf("%d calls got the 503, want all %d", got503.Load(), calls)
	}
}

// TestRetryMultiplexed: the call rules are the same on HTTP/2 and HTTP/3:
// a status retry of a GET, and a second refusal of a POST's stream, which
// the automatic resend cannot take and a configured retry can, since the
// refusal proves the server did not process it.
func TestRetryMultiplexed(t *testing.T) {
	busy := func() http.Header { return http.Header{"Content-Length": {"4"}} }
	t.Run("h2 status", func(t *testing.T) {
		s := startH2(t, h2Script([]h2server.Action{h2server.Respond(503, busy(), []byte("busy")), h2server.OK("ok")}))
		tr, obs := h2Client(t, s, replaysafe.Options{Retry: quick})
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/r", ""))
		if err != nil || code != 200 {
			t.Fatalf("got %d %v", code, err)
		}
		wantH2Copies(t, s, "/r", 0, 0)
		wantCalls(t, obs, "/r", fsm.RuleRetryStatus, fsm.RuleDeliverFinalResponse)
	})
	t.Run("h2 refused twice", func(t *testing.T) {
		s := startH2(t, h2Script([]h2server.Action{h2server.Refuse(), h2server.Refuse(), h2server.OK("ok")}))
		tr, obs := h2Client(t, s, replaysafe.Options{Retry: quick})
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/r", "pay 10"))
		if err != nil || code != 200 {
			t.Fatalf("got %d %v", code, err)
		}
		if n := len(h2Copies(s, "/r")); n != 3 {
			t.Fatalf("server saw %d streams of /r, want 3 (two refused)", n)
		}
		wantCalls(t, obs, "/r", fsm.RuleEvidenceRefusedStream, fsm.RuleEvidenceRefusedStream, fsm.RuleDeliverFinalResponse)
		if as := obs.attemptsFor("/r"); as[0].Call.Retry || !as[1].Call.Retry {
			t.Errorf("the first refusal is the automatic resend, the second a configured retry: %v, %v", as[0].Call, as[1].Call)
		}
	})
	t.Run("h2 refused twice without a policy", func(t *testing.T) {
		s := startH2(t, h2Script([]h2server.Action{h2server.Refuse(), h2server.Refuse(), h2server.OK("ok")}))
		tr, _ := h2Client(t, s, replaysafe.Options{})
		_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/r", "pay 10"))
		wantRule(t, err, fsm.RuleNoSecondResend, 2)
	})
	t.Run("h3 status", func(t *testing.T) {
		s := startH3(t, h3Script([]h3server.Action{h3server.Respond(503, busy(), []byte("busy")), h3server.OK("ok")}))
		tr, obs := h3Client(t, s, replaysafe.Options{Retry: quick})
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), "PUT", s.URL()+"/r", "v=1"))
		if err != nil || code != 200 {
			t.Fatalf("got %d %v", code, err)
		}
		wantH3Copies(t, s, "/r", 0, 0)
		wantCalls(t, obs, "/r", fsm.RuleRetryStatus, fsm.RuleDeliverFinalResponse)
	})
}
