package replaysafe

import (
	"context"
	"net/http"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/driver"
)

// Retry configures retries that cannot duplicate a side effect: the same
// rules that decide the automatic resend decide every retry (fsm.Call,
// rules RS22 to RS31; docs/retries.md). Set it in Options.Retry for every
// call, or per request with WithRetry.
//
// The zero value configures none: a call then makes its first attempt and
// at most the one automatic resend the evidence allows. With MaxAttempts
// set, a call is also retried
//   - on a response status in Statuses (429, 502, 503, 504 by default),
//   - after an ambiguous failure (a timeout, a response cut after it
//     started, a fresh connection failing),
//
// both only for a request whose copies have no further side effect (an
// idempotent method or an Idempotency-Key, and a body that can be produced
// again: none, or GetBody), and, for any method, when no connection could
// be established (nothing was sent) and the body is as it was. A POST
// without a key is never retried after the server may have seen it, and a
// one-shot body that was read is never replaced. Every retry waits a jittered backoff (or the
// Retry-After of a 429 or 503), resolves the route anew, and needs room in
// the route's retry budget.
type Retry struct {
	// MaxAttempts is the most wire attempts a call makes, counting the
	// first, the automatic resend and every retry together, so a request
	// reaches the server at most MaxAttempts times. At most 10. Zero
	// configures no retries (two attempts at most, as without a policy);
	// 1 sends every request once and never resends it.
	MaxAttempts int
	// Statuses are the response statuses that are retried. Nil means
	// DefaultRetryStatuses; an empty, non-nil slice retries none.
	Statuses []int
	// BaseDelay and MaxDelay shape the wait before a retry: a uniformly
	// random duration below min(MaxDelay, BaseDelay·2^(k−2)) before wire
	// attempt k ("full jitter"; the automatic resend counts as attempt 2).
	// Zero means 100 ms and 10 s.
	BaseDelay, MaxDelay time.Duration
	// MaxRetryAfter is the longest Retry-After (RFC 9110 §10.2.3) of a 429
	// or 503 that a retry waits for; a response asking for longer is
	// delivered (RS28). Zero means 30 s.
	MaxRetryAfter time.Duration
	// Budget bounds the retries of each route.
	Budget RetryBudget
	// Hedge, when positive, sends extra copies of a slow request (off
	// by default): when a call has no response header Hedge after its
	// copy started (or, if it was still getting its connection then, as
	// soon as it has one), another copy goes out on another connection, and
	// again after each further Hedge, up to MaxHedges copies beside the
	// first; the first response header wins and the other copies are
	// canceled, their bodies closed (fsm.Call.Hedge, rules RS29 to RS31;
	// docs/retries.md). A copy goes only where the ambiguous-failure
	// rules would let the request go twice: an idempotent method (with
	// HedgeKeyed, a request with an Idempotency-Key too) and a body that
	// can be produced again (none, or GetBody). Every copy counts in
	// MaxAttempts, which must be at least 2 for any hedge, and needs room
	// in the route's retry budget, so a slow upstream does not get
	// multiplied load.
	Hedge time.Duration
	// MaxHedges is the most hedges a call sends beside its first copy.
	// Zero means 1; at most MaxAttempts−1 are ever sent.
	MaxHedges int
	// HedgeKeyed lets a request that is idempotent only by its
	// Idempotency-Key (or X-Idempotency-Key) be hedged. Its copies then
	// run at the same time, which a server may answer with 409 Conflict
	// while the first runs; a sequential retry of it needs no such
	// option.
	HedgeKeyed bool
}

// RetryBudget bounds the retries of one route (scheme, host and port) so
// that a failing upstream does not get multiplied load: over the last
// Window, retries may be at most Ratio of the route's calls plus
// MinPerSecond for each second of the window. The automatic resend and
// the 425 retry, made on evidence and at most once a call, do not draw on
// it. A retry the budget refuses ends the call (RS27).
type RetryBudget struct {
	// Ratio is the share of the route's calls that may be retried. Zero
	// means 0.2.
	Ratio float64
	// MinPerSecond is a floor of retries per second, for routes with few
	// calls. Zero means 10; negative means none.
	MinPerSecond int
	// Window is the span the budget counts over, in whole seconds. Zero
	// means 10 s.
	Window time.Duration
}

// DefaultRetryStatuses are the statuses a Retry retries when its Statuses
// is nil: 429 Too Many Requests, 502 Bad Gateway, 503 Service Unavailable
// and 504 Gateway Timeout.
var DefaultRetryStatuses = []int{429, 502, 503, 504}

type retryKey struct{}

// WithRetry returns a context that carries r as the retry policy of the
// requests made with it, in place of Options.Retry. Retry{MaxAttempts: 1}
// switches retries and the automatic resend off for those requests.
// WithRetry reads r once, now: the requests of one context share what it
// made of r, and a change to r.Statuses afterwards changes nothing.
func WithRetry(ctx context.Context, r Retry) context.Context {
	return context.WithValue(ctx, retryKey{}, compileRetry(r))
}

// retryFor returns the retry policy of req: the one WithRetry put in its
// context, else def (Options.Retry's).
func retryFor(req *http.Request, def *driver.Policy) *driver.Policy {
	if p, ok := req.Context().Value(retryKey{}).(*driver.Policy); ok {
		return p
	}
	return def
}

// compileRetry returns r in the driver's terms, made once for all the
// calls under r (a call keeps a pointer to it, not a copy).
func compileRetry(r Retry) *driver.Policy {
	if r.MaxAttempts <= 0 {
		return &driver.Policy{}
	}
	statuses := r.Statuses
	if statuses == nil {
		statuses = DefaultRetryStatuses
	}
	p := fsm.Retry{
		Attempts:      uint8(min(r.MaxAttempts, driver.MaxAttempts)),
		Statuses:      fsm.Statuses(statuses...),
		Base:          orDefault(r.BaseDelay, 100*time.Millisecond),
		Cap:           orDefault(r.MaxDelay, 10*time.Second),
		MaxRetryAfter: orDefault(r.MaxRetryAfter, 30*time.Second),
	}
	var delay time.Duration
	if r.Hedge > 0 {
		delay = r.Hedge
		p.Hedges = uint8(min(max(r.MaxHedges, 1), driver.MaxAttempts-1))
		p.HedgeKeyed = r.HedgeKeyed
	}
	return &driver.Policy{Retry: p, Budget: driver.Budget(r.Budget.normalized()), HedgeDelay: delay}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func (b RetryBudget) normalized() RetryBudget {
	if b.Ratio <= 0 {
		b.Ratio = 0.2
	}
	switch {
	case b.MinPerSecond == 0:
		b.MinPerSecond = 10
	case b.MinPerSecond < 0:
		b.MinPerSecond = 0
	}
	if b.Window <= 0 {
		b.Window = 10 * time.Second
	}
	b.Window = max(b.Window.Truncate(time.Second), time.Second)
	return b
}
