package driver

import (
	"strconv"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/internal/pool"
)

func TestRetryBudgetWindowSlides(t *testing.T) {
	var b retryBudgets
	p := Budget{Ratio: 0.5, MinPerSecond: 0, Window: 2 * time.Second}
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
// at most pool.MaxMemo budgets.
func TestRetryBudgetsBounded(t *testing.T) {
	var b retryBudgets
	p := Budget{Ratio: 0.2, MinPerSecond: 10, Window: 10 * time.Second}
	now := time.Now()
	for i := range pool.MaxMemo + 500 {
		b.call("host"+strconv.Itoa(i)+":443", p, now)
	}
	if n := len(b.routes); n > pool.MaxMemo {
		t.Fatalf("%d budgets kept, want at most %d", n, pool.MaxMemo)
	}
}

// TestJitterHook: a retry's jitter comes from the Transport's hook when
// a test sets one.
func TestJitterHook(t *testing.T) {
	tr := New(Config{})
	tr.rand = func() float64 { return 0.25 }
	if tr.jitter() != 0.25 {
		t.Error("the jitter hook is not used")
	}
}
