package replaysafe

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// Retry configures retries that cannot duplicate a side effect: the same
// rules that decide the automatic resend decide every retry (fsm.Call,
// rules RS22 to RS28; docs/retries.md). Set it in Options.Retry for every
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

// maxRetryAttempts bounds Retry.MaxAttempts.
const maxRetryAttempts = 10

type retryKey struct{}

// WithRetry returns a context that carries r as the retry policy of the
// requests made with it, in place of Options.Retry. Retry{MaxAttempts: 1}
// switches retries and the automatic resend off for those requests.
func WithRetry(ctx context.Context, r Retry) context.Context {
	return context.WithValue(ctx, retryKey{}, r)
}

// retryFor returns the policy of req, in fsm terms, with its budget.
func (t *Transport) retryFor(req *http.Request) (fsm.Retry, RetryBudget) {
	r := t.opt.Retry
	if v, ok := req.Context().Value(retryKey{}).(Retry); ok {
		r = v
	}
	if r.MaxAttempts <= 0 {
		return fsm.Retry{}, RetryBudget{}
	}
	statuses := r.Statuses
	if statuses == nil {
		statuses = DefaultRetryStatuses
	}
	return fsm.Retry{
		Attempts:      uint8(min(r.MaxAttempts, maxRetryAttempts)),
		Statuses:      fsm.Statuses(statuses...),
		Base:          orDefault(r.BaseDelay, 100*time.Millisecond),
		Cap:           orDefault(r.MaxDelay, 10*time.Second),
		MaxRetryAfter: orDefault(r.MaxRetryAfter, 30*time.Second),
	}, r.Budget.normalized()
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

// retryBudgets are the retry budgets of a Transport's routes, bounded to
// maxMemo routes.
type retryBudgets struct {
	mu     sync.Mutex
	routes map[string]*budgetWindow
}

// budgetWindow counts a route's calls and retries per second over the
// last window: slot s holds the counts of the second sec[s].
type budgetWindow struct {
	sec            []int64
	calls, retries []int
}

// window returns the route's counts, made for a window of n seconds.
func (b *retryBudgets) window(route string, n int) *budgetWindow {
	if b.routes == nil {
		b.routes = map[string]*budgetWindow{}
	}
	w := b.routes[route]
	if w == nil || len(w.sec) != n {
		if len(b.routes) >= maxMemo {
			for k := range b.routes { // an arbitrary route's counts start over
				delete(b.routes, k)
				break
			}
		}
		w = &budgetWindow{sec: make([]int64, n), calls: make([]int, n), retries: make([]int, n)}
		b.routes[route] = w
	}
	return w
}

// slot returns the slot of second sec, emptied when it held an older one.
func (w *budgetWindow) slot(sec int64) int {
	i := int(sec % int64(len(w.sec)))
	if w.sec[i] != sec {
		w.sec[i], w.calls[i], w.retries[i] = sec, 0, 0
	}
	return i
}

// sums returns the calls and retries counted in the window ending at sec.
func (w *budgetWindow) sums(sec int64) (calls, retries int) {
	for i, s := range w.sec {
		if s > sec-int64(len(w.sec)) && s <= sec {
			calls += w.calls[i]
			retries += w.retries[i]
		}
	}
	return calls, retries
}

// call counts one call of route at now.
func (b *retryBudgets) call(route string, p RetryBudget, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.window(route, int(p.Window/time.Second))
	w.calls[w.slot(now.Unix())]++
}

// reserve counts one retry of route at now when the budget has room for
// it, and reports whether it had.
func (b *retryBudgets) reserve(route string, p RetryBudget, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.window(route, int(p.Window/time.Second))
	calls, retries := w.sums(now.Unix())
	if float64(retries+1) > p.Ratio*float64(calls)+float64(p.MinPerSecond*len(w.sec)) {
		return false
	}
	w.retries[w.slot(now.Unix())]++
	return true
}

// unreserve gives back a retry reserved at now.
func (b *retryBudgets) unreserve(route string, p RetryBudget, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.window(route, int(p.Window/time.Second))
	if i := w.slot(now.Unix()); w.retries[i] > 0 {
		w.retries[i]--
	}
}

// jitter returns a random fraction in [0, 1) for a retry's wait.
func (t *Transport) jitter() float64 {
	if t.rand != nil {
		return t.rand()
	}
	return rand.Float64()
}

// sleep waits d or until ctx ends, and returns ctx's error then.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
