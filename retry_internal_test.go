package replaysafe

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestRetryBudgetWindowSlides(t *testing.T) {
	var b retryBudgets
	p := RetryBudget{Ratio: 0.5, MinPerSecond: -1, Window: 2 * time.Second}.normalized()
	t0 := time.Unix(1000, 0)
	for range 4 {
		b.call("r", p, t0)
	}
	got := 0
	for b.reserve("r", p, t0) {
		got++
		if got > 10 {
			t.Fatal("the budget never ran out")
		}
	}
	if got != 2 {
		t.Fatalf("%d retries for 4 calls at ratio 0.5, want 2", got)
	}
	b.unreserve("r", p, t0)
	if !b.reserve("r", p, t0) {
		t.Fatal("a retry given back is not available again")
	}
	// Two seconds on, the window holds none of those calls or retries.
	if b.reserve("r", p, t0.Add(2*time.Second)) {
		t.Fatal("retries allowed with no call in the window")
	}
	b.call("r", p, t0.Add(2*time.Second))
	b.call("r", p, t0.Add(2*time.Second))
	if !b.reserve("r", p, t0.Add(2*time.Second)) {
		t.Fatal("no retry for two new calls")
	}
}

// TestRetryBudgetsBounded: a Transport called for ever more routes keeps
// at most maxMemo budgets.
func TestRetryBudgetsBounded(t *testing.T) {
	var b retryBudgets
	p := RetryBudget{}.normalized()
	now := time.Now()
	for i := range maxMemo + 500 {
		b.call("host"+strconv.Itoa(i)+":443", p, now)
	}
	if n := len(b.routes); n > maxMemo {
		t.Fatalf("%d budgets kept, want at most %d", n, maxMemo)
	}
}

func TestRetryDefaults(t *testing.T) {
	p := RetryBudget{}.normalized()
	if p.Ratio != 0.2 || p.MinPerSecond != 10 || p.Window != 10*time.Second {
		t.Errorf("budget defaults %+v", p)
	}
	if p := (RetryBudget{Window: 1500 * time.Millisecond, MinPerSecond: -3}).normalized(); p.Window != time.Second || p.MinPerSecond != 0 {
		t.Errorf("window rounds down to whole seconds and a negative floor is none: %+v", p)
	}
	tr := New(Options{Retry: Retry{MaxAttempts: 50, Statuses: []int{}}})
	req := mustRequest(t)
	r, _ := tr.retryFor(req)
	if r.Attempts != maxRetryAttempts || r.Statuses.Has(503) || r.Base != 100*time.Millisecond || r.Cap != 10*time.Second || r.MaxRetryAfter != 30*time.Second {
		t.Errorf("policy %v", r)
	}
	r, _ = New(Options{Retry: Retry{MaxAttempts: 2}}).retryFor(req)
	if !r.Statuses.Has(429) || !r.Statuses.Has(504) || r.Statuses.Has(500) {
		t.Errorf("default statuses %v", r.Statuses)
	}
	tr.rand = func() float64 { return 0.25 }
	if tr.jitter() != 0.25 {
		t.Error("the jitter hook is not used")
	}
}

func mustRequest(t *testing.T) *http.Request {
	t.Helper()
	req, err := http.NewRequest("GET", "http://127.0.0.1:1/", nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
