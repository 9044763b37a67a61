package driver

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/internal/pool"
)

// Budget bounds the retries of one route: over the last Window, retries
// may be at most Ratio of the route's calls plus MinPerSecond for each
// second of the window (the face's RetryBudget, normalized: Window in
// whole seconds, at least one).
type Budget struct {
	Ratio        float64
	MinPerSecond int
	Window       time.Duration
}

// retryBudgets are the retry budgets of a Transport's routes, bounded to
// pool.MaxMemo routes.
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
		if len(b.routes) >= pool.MaxMemo {
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
func (b *retryBudgets) call(route string, p Budget, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.window(route, int(p.Window/time.Second))
	w.calls[w.slot(now.Unix())]++
}

// reserve counts one retry of route at now when the budget has room for
// it, and reports whether it had.
func (b *retryBudgets) reserve(route string, p Budget, now time.Time) bool {
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
func (b *retryBudgets) unreserve(route string, p Budget, now time.Time) {
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
