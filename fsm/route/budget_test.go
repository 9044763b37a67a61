package route

import (
	"errors"
	"math"
	"net"
	"os"
	"testing"
	"time"
)

const ms = Instant(time.Millisecond)

func TestStepNames(t *testing.T) {
	want := []string{"none", "wait-capacity", "dns", "tcp", "tls-to-proxy", "connect", "socks", "tls-to-origin"}
	for s := range stepCount {
		if s.String() != want[s] {
			t.Errorf("Step(%d) = %q, want %q", s, s, want[s])
		}
		got, ok := ParseStep(s.String())
		if ok != (s != StepNone) || ok && got != s {
			t.Errorf("ParseStep(%q) = %v, %v", s, got, ok)
		}
	}
	if got := Step(42).String(); got != "Step(42)" {
		t.Errorf("invalid step prints %q", got)
	}
	perHop := map[Step]bool{StepProxyTLS: true, StepConnect: true, StepSOCKS: true}
	for s := range stepCount {
		if s.PerHop() != perHop[s] {
			t.Errorf("%v.PerHop() = %v", s, s.PerHop())
		}
	}
}

func TestBudgetArithmetic(t *testing.T) {
	tests := []struct {
		name      string
		start     Instant
		limit     time.Duration
		now       Instant
		remaining time.Duration
		limited   bool
		expired   bool
		elapsed   time.Duration
	}{
		{"at start", 1000 * ms, 200 * time.Millisecond, 1000 * ms, 200 * time.Millisecond, true, false, 0},
		{"midway", 1000 * ms, 200 * time.Millisecond, 1150 * ms, 50 * time.Millisecond, true, false, 150 * time.Millisecond},
		{"one nanosecond left", 0, 200 * time.Millisecond, 200*ms - 1, 1, true, false, 200*time.Millisecond - 1},
		{"exactly at deadline", 0, 200 * time.Millisecond, 200 * ms, 0, true, true, 200 * time.Millisecond},
		{"past deadline", 0, 200 * time.Millisecond, 950 * ms, 0, true, true, 950 * time.Millisecond},
		{"clock before start", 500 * ms, 200 * time.Millisecond, 400 * ms, 300 * time.Millisecond, true, false, 0},
		{"negative instants", -300 * ms, 200 * time.Millisecond, -150 * ms, 50 * time.Millisecond, true, false, 150 * time.Millisecond},
		{"no limit", 0, 0, 1 << 62, 0, false, false, 1 << 62},
		{"negative limit is no limit", 0, -time.Second, 10 * ms, 0, false, false, 10 * time.Millisecond},
		{"deadline clamped at clock end", math.MaxInt64 - 10, time.Hour, math.MaxInt64 - 5, 5, true, false, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Start(tt.start, tt.limit)
			rem, ok := b.Remaining(tt.now)
			if rem != tt.remaining || ok != tt.limited {
				t.Errorf("Remaining = %v, %v; want %v, %v", rem, ok, tt.remaining, tt.limited)
			}
			if b.Limited() != tt.limited {
				t.Errorf("Limited = %v", b.Limited())
			}
			if b.Expired(tt.now) != tt.expired {
				t.Errorf("Expired = %v, want %v", b.Expired(tt.now), tt.expired)
			}
			if b.Elapsed(tt.now) != tt.elapsed {
				t.Errorf("Elapsed = %v, want %v", b.Elapsed(tt.now), tt.elapsed)
			}
			err := b.Check(tt.now, StepTCP, 1)
			if (err != nil) != tt.expired {
				t.Errorf("Check = %v, want expired=%v", err, tt.expired)
			}
			if b.Started() != tt.start {
				t.Errorf("Started = %v", b.Started())
			}
		})
	}
}

func TestBudgetDeadline(t *testing.T) {
	if d, ok := Start(100*ms, time.Second).Deadline(); !ok || d != 1100*ms {
		t.Errorf("Deadline = %v, %v", d, ok)
	}
	if _, ok := Start(100*ms, 0).Deadline(); ok {
		t.Error("unlimited budget has a deadline")
	}
	if d, ok := Start(math.MaxInt64-1, time.Second).Deadline(); !ok || d != math.MaxInt64 {
		t.Errorf("overflowing deadline = %v, %v", d, ok)
	}
	if (Budget{}).Limited() {
		t.Error("zero Budget is limited")
	}
}

// TestBudgetStepsShareOneDeadline walks an acquisition through a two-hop
// chain: each step sees only what the earlier steps left, never a fresh
// allowance of its own.
func TestBudgetStepsShareOneDeadline(t *testing.T) {
	b := Start(0, 200*time.Millisecond)
	steps := []struct {
		step   Step
		hop    int
		now    Instant
		remain time.Duration
		fail   bool
	}{
		{StepWaitCapacity, 0, 0, 200 * time.Millisecond, false},
		{StepDNS, 1, 30 * ms, 170 * time.Millisecond, false},
		{StepTCP, 1, 40 * ms, 160 * time.Millisecond, false},
		{StepProxyTLS, 1, 90 * ms, 110 * time.Millisecond, false},
		{StepConnect, 1, 120 * ms, 80 * time.Millisecond, false},
		{StepConnect, 2, 199 * ms, 1 * time.Millisecond, false},
		{StepOriginTLS, 0, 200 * ms, 0, true},
	}
	for _, s := range steps {
		rem, _ := b.Remaining(s.now)
		if rem != s.remain {
			t.Errorf("%v hop %d at %v: remaining %v, want %v", s.step, s.hop, s.now, rem, s.remain)
		}
		err := b.Check(s.now, s.step, s.hop)
		if (err != nil) != s.fail {
			t.Fatalf("%v hop %d: Check = %v", s.step, s.hop, err)
		}
		if err != nil {
			var de *DeadlineError
			if !errors.As(err, &de) || de.Step != s.step || de.Hop != s.hop || de.Elapsed != 200*time.Millisecond || de.Limit != 200*time.Millisecond {
				t.Errorf("error = %#v", err)
			}
		}
	}
}

func TestRenewStartsFreshBudget(t *testing.T) {
	first := Start(0, 200*time.Millisecond)
	if !first.Expired(250 * ms) {
		t.Fatal("first budget not expired")
	}
	// A stale pooled connection failed at 250ms: the fresh acquisition
	// gets the whole limit again.
	second := first.Renew(250 * ms)
	if rem, _ := second.Remaining(250 * ms); rem != 200*time.Millisecond {
		t.Errorf("renewed budget has %v left", rem)
	}
	if second.Expired(449*ms) || !second.Expired(450*ms) {
		t.Error("renewed budget runs out at the wrong time")
	}
	if first.Started() != 0 {
		t.Error("Renew changed the original budget")
	}
}

func TestDeadlineError(t *testing.T) {
	b := Start(0, 200*time.Millisecond)
	tests := []struct {
		err  *DeadlineError
		want string
	}{
		{b.Exceeded(201*ms, StepConnect, 2, nil),
			"route: connection acquisition deadline 200ms exceeded after 201ms during connect at proxy hop 2"},
		{b.Exceeded(200*ms, StepWaitCapacity, 0, nil),
			"route: connection acquisition deadline 200ms exceeded after 200ms during wait-capacity"},
		{b.Exceeded(205*ms, StepOriginTLS, 0, os.ErrDeadlineExceeded),
			"route: connection acquisition deadline 200ms exceeded after 205ms during tls-to-origin: i/o timeout"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q\nwant      %q", got, tt.want)
		}
		if !tt.err.Timeout() || tt.err.Temporary() {
			t.Error("Timeout/Temporary wrong")
		}
	}
	var ne net.Error = tests[0].err
	if !ne.Timeout() {
		t.Error("not a net.Error timeout")
	}
	if !errors.Is(tests[2].err, os.ErrDeadlineExceeded) {
		t.Error("cause not unwrapped")
	}
	if err := b.Check(199*ms, StepDNS, 1); err != nil {
		t.Errorf("Check with time left = %v", err)
	}
}
