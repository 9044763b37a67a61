package recorder_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
)

// manualClock is a Clock the test advances; its timers fire in Advance.
type manualClock struct {
	mu     sync.Mutex
	now    fsm.Instant
	timers []*manualTimer
}

type manualTimer struct {
	at      fsm.Instant
	f       func()
	stopped bool
}

func (c *manualClock) Now() fsm.Instant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{at: c.now + fsm.Instant(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves the clock by d and runs the timers that came due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += fsm.Instant(d)
	var due []func()
	for _, t := range c.timers {
		if !t.stopped && t.at <= c.now {
			t.stopped = true
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// TestDeadlineFires: the acquire limit passes with no connection; the
// Core feeds the tick itself, the machine fails the attempt (RS06), and
// onDeadline is called once with the phase.
func TestDeadlineFires(t *testing.T) {
	clock := &manualClock{}
	var phases []fsm.Phase
	var c recorder.Core
	c.Init(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{Acquire: time.Second}, clock, func(p fsm.Phase) { phases = append(phases, p) })
	clock.Advance(999 * time.Millisecond)
	if d := c.Decision(); d.Action.Final() {
		t.Fatalf("decided before the limit: %v", d)
	}
	clock.Advance(time.Millisecond)
	if d := c.Decision(); d.Rule != fsm.RuleTimeout || len(phases) != 1 || phases[0] != fsm.PhaseAcquire {
		t.Fatalf("decision %v, deadline calls %v", d, phases)
	}
	if ev := c.Events(); len(ev) != 1 || ev[0].Kind != fsm.EventTick {
		t.Fatalf("events %v", ev)
	}
}

// TestSealStopsFeeding: once sealed, a late event changes neither the
// decision nor the trace, and the trace ends with the sealed decision.
func TestSealStopsFeeding(t *testing.T) {
	clock := &manualClock{}
	var c recorder.Core
	c.Init(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, clock, nil)
	for _, k := range []fsm.EventKind{fsm.EventConnAcquired, fsm.EventFirstByteWritten, fsm.EventFirstResponseByte, fsm.EventFinalHeaders, fsm.EventResponseComplete} {
		clock.Advance(time.Millisecond)
		c.Feed(fsm.Event{Kind: k})
	}
	d, events, trace := c.Seal()
	c.Feed(fsm.Event{Kind: fsm.EventRequestWritten}) // a late write hook
	if got := c.Decision(); got != d || len(c.Events()) != len(events) {
		t.Fatalf("after the seal: %v, %d events; sealed %v, %d", got, len(c.Events()), d, len(events))
	}
	if !strings.HasSuffix(trace, "expect "+d.String()+"\n") || strings.Contains(trace, "request-written") {
		t.Fatalf("trace:\n%s", trace)
	}
}

// TestSkipEventsDecidesAlike: a Core that keeps no trace decides every
// event exactly as one that keeps it; it returns no events and its trace
// has no event or expect line. The trace it keeps is bounded by
// MaxEvents, past its first allocation.
func TestSkipEventsDecidesAlike(t *testing.T) {
	clock := &manualClock{}
	var kept, skipped recorder.Core
	kept.Init(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, clock, nil)
	skipped.Init(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, clock, nil)
	skipped.SkipEvents()
	kinds := []fsm.EventKind{fsm.EventConnAcquired, fsm.EventFirstByteWritten, fsm.EventRequestWritten,
		fsm.EventFirstResponseByte, fsm.EventInformational, fsm.EventFinalHeaders}
	for i := range recorder.MaxEvents + 4 {
		k := kinds[min(i, len(kinds)-1)]
		if i >= len(kinds) {
			k = fsm.EventBodyRead
		}
		clock.Advance(time.Millisecond)
		if a, b := kept.Feed(fsm.Event{Kind: k}), skipped.Feed(fsm.Event{Kind: k}); a != b {
			t.Fatalf("event %d (%v): kept decided %v, skipped %v", i, k, a, b)
		}
	}
	if n := len(kept.Events()); n != recorder.MaxEvents {
		t.Fatalf("kept %d events, want the bound %d", n, recorder.MaxEvents)
	}
	if ev := skipped.Events(); len(ev) != 0 {
		t.Fatalf("skipped kept %d events", len(ev))
	}
	if tr := skipped.Trace(); strings.Contains(tr, "acquired") || strings.Contains(tr, "expect") {
		t.Fatalf("skipped trace:\n%s", tr)
	}
	if tr := kept.Trace(); !strings.Contains(tr, "conn-acquired") || !strings.Contains(tr, "expect "+kept.Decision().String()) {
		t.Fatalf("kept trace:\n%s", tr)
	}
}
