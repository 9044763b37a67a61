package replaysafe

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/internal/driver"
)

func TestRetryDefaults(t *testing.T) {
	p := RetryBudget{}.normalized()
	if p.Ratio != 0.2 || p.MinPerSecond != 10 || p.Window != 10*time.Second {
		t.Errorf("budget defaults %+v", p)
	}
	if p := (RetryBudget{Window: 1500 * time.Millisecond, MinPerSecond: -3}).normalized(); p.Window != time.Second || p.MinPerSecond != 0 {
		t.Errorf("window rounds down to whole seconds and a negative floor is none: %+v", p)
	}
	r := compileRetry(Retry{MaxAttempts: 50, Statuses: []int{}}).Retry
	if r.Attempts != driver.MaxAttempts || r.Statuses.Has(503) || r.Base != 100*time.Millisecond || r.Cap != 10*time.Second || r.MaxRetryAfter != 30*time.Second {
		t.Errorf("policy %v", r)
	}
	r = compileRetry(Retry{MaxAttempts: 2}).Retry
	if !r.Statuses.Has(429) || !r.Statuses.Has(504) || r.Statuses.Has(500) {
		t.Errorf("default statuses %v", r.Statuses)
	}
	// Hedging: off without a delay or without MaxAttempts; Max zero is
	// one hedge, and no more than MaxAttempts−1 ever.
	for _, c := range []struct {
		r      Retry
		hedges uint8
		keyed  bool
		delay  time.Duration
	}{
		{Retry{MaxAttempts: 3, MaxHedges: 2}, 0, false, 0},
		{Retry{Hedge: time.Second, MaxHedges: 2}, 0, false, 0},
		{Retry{MaxAttempts: 3, Hedge: time.Second}, 1, false, time.Second},
		{Retry{MaxAttempts: 3, Hedge: time.Second, MaxHedges: 40, HedgeKeyed: true}, driver.MaxAttempts - 1, true, time.Second},
	} {
		pol := compileRetry(c.r)
		p, d := pol.Retry, pol.HedgeDelay
		if p.Hedges != c.hedges || p.HedgeKeyed != c.keyed || d != c.delay {
			t.Errorf("%+v: hedges %d keyed %v delay %v, want %d %v %v", c.r, p.Hedges, p.HedgeKeyed, d, c.hedges, c.keyed, c.delay)
		}
	}
}

// TestRetryFromContext: a request's context's policy (WithRetry) wins
// over the Transport's, is made once when WithRetry is called, and is
// shared by the requests made with that context.
func TestRetryFromContext(t *testing.T) {
	def := compileRetry(Retry{MaxAttempts: 2})
	if got := retryFor(mustRequest(t), def); got != def {
		t.Errorf("a request without WithRetry has policy %+v, want the Transport's", got)
	}
	statuses := []int{500}
	ctx := WithRetry(context.Background(), Retry{MaxAttempts: 4, Statuses: statuses})
	statuses[0] = 503 // after WithRetry: changes nothing
	a, b := mustRequest(t).WithContext(ctx), mustRequest(t).WithContext(ctx)
	p := retryFor(a, def)
	if p.Retry.Attempts != 4 || !p.Retry.Statuses.Has(500) || p.Retry.Statuses.Has(503) {
		t.Errorf("WithRetry's policy %v, want 4 attempts on 500 only", p.Retry)
	}
	if retryFor(b, def) != p {
		t.Error("two requests of one WithRetry context do not share its policy")
	}
	if off := retryFor(mustRequest(t).WithContext(WithRetry(ctx, Retry{})), def); off.Retry.On() {
		t.Errorf("WithRetry(Retry{}) gives %v, want no policy", off.Retry)
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

// TestNewRefusesCallerRetriesWithRetry: CallerRetries says the caller
// counts the attempts, Retry that replaysafe makes more: New refuses the
// pair with a message naming both fields, and takes either alone.
func TestNewRefusesCallerRetriesWithRetry(t *testing.T) {
	defer func() {
		r := recover()
		err, ok := r.(error)
		if !ok || !strings.Contains(err.Error(), "CallerRetries") || !strings.Contains(err.Error(), "Options.Retry") {
			t.Errorf("New panicked with %v, want an error naming both fields", r)
		}
	}()
	New(Options{CallerRetries: true}).CloseIdleConnections()
	New(Options{Retry: Retry{MaxAttempts: 3}}).CloseIdleConnections()
	New(Options{CallerRetries: true, Retry: Retry{MaxAttempts: 3}})
	t.Error("New took CallerRetries with Retry")
}
