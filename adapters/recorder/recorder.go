// Package recorder is the one place where a wire attempt's events meet
// its fsm.Machine, for every protocol: Core stamps and feeds the events,
// keeps them as the attempt's trace, and arms the deadline timer the
// machine asks for, calling back when a phase limit decided. The HTTP/1.1
// recorder (adapters/h1) and replaysafe's HTTP/2 and HTTP/3 one embed it
// and add what their stack can observe; neither keeps a machine, an event
// list or a timer of its own. An embedder driving fsm from its own client
// embeds it the same way (docs/embedding.md).
//
// TimeoutError is what an attempt is aborted with when a phase limit
// passed: the error replaysafe's calls wrap for a timeout.
package recorder

import (
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// Clock is the monotonic clock a Core reads instants from and arms its
// deadline timer on.
type Clock interface {
	// Now returns the current instant.
	Now() fsm.Instant
	// AfterFunc calls f in its own goroutine after d and returns a
	// function that stops the timer, reporting whether it did.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// NewClock returns a Clock on the process's monotonic clock whose instant
// zero is now.
func NewClock() Clock { return systemClock{origin: time.Now()} }

type systemClock struct{ origin time.Time }

func (c systemClock) Now() fsm.Instant { return fsm.Instant(time.Since(c.origin)) }

func (c systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// MaxEvents bounds the events a Core keeps for its trace; an attempt
// feeds about a dozen, every progress event once.
const MaxEvents = 64

// firstEvents is the capacity of a trace's first allocation, made with
// its first event: a whole exchange with a request body (seven events),
// with room for one 1xx or a failure. A longer trace grows its slice
// once. The trace lives apart from the Core so that a Core that keeps
// none (SkipEvents) holds no room for one.
const firstEvents = 8

// Core feeds one wire attempt's events into its machine. Embed it by
// value and call Init once; Mu guards it and whatever the embedding
// recorder adds. The Locked methods need Mu held; the others take it.
type Core struct {
	Mu sync.Mutex

	clock      Clock
	onDeadline Deadliner
	start      fsm.Instant

	m          fsm.Machine
	events     []fsm.Event
	stopTimer  func() bool
	timerAt    fsm.Instant
	stopped    bool
	sealed     bool // the attempt was reported: nothing more is fed
	skipEvents bool // no trace is kept (SkipEvents)
}

// Init starts the machine for req now and arms its first deadline.
// onDeadline, if not nil, is called (in the timer's goroutine, without
// Mu) when a phase limit passed and the machine failed the attempt or
// discarded its connection because of it: the caller then aborts the
// exchange.
func (c *Core) Init(req fsm.Request, lim fsm.Limits, clock Clock, onDeadline func(fsm.Phase)) {
	var d Deadliner
	if onDeadline != nil {
		d = DeadlineFunc(onDeadline)
	}
	c.InitUnarmed(req, lim, clock, d)
	c.Arm()
}

// Deadliner is told when a phase limit passed and the machine failed the
// attempt or discarded its connection because of it (see Init).
type Deadliner interface {
	DeadlinePassed(fsm.Phase)
}

// DeadlineFunc is a func as a Deadliner.
type DeadlineFunc func(fsm.Phase)

// DeadlinePassed calls f.
func (f DeadlineFunc) DeadlinePassed(p fsm.Phase) { f(p) }

// InitUnarmed starts the machine for req now, as Init does, but leaves
// its first deadline unarmed until Arm or the first event fed: an
// attempt that acquires a pooled connection at once feeds
// EventConnAcquired long before the acquisition limit, and needs no
// timer for it. The deadline is an instant, so arming it later changes
// nothing about when it passes.
//
// onDeadline is a Deadliner rather than a func so that an attempt can
// pass itself without allocating a method value.
func (c *Core) InitUnarmed(req fsm.Request, lim fsm.Limits, clock Clock, onDeadline Deadliner) {
	now := clock.Now()
	c.clock, c.onDeadline, c.start = clock, onDeadline, now
	c.m = fsm.New(req, lim, now)
}

// SkipEvents makes the Core keep no trace: Events returns nothing and
// Trace no event lines, while every event still drives the machine. A
// driver whose attempts nobody observes calls it after Init, before the
// first event, so that an attempt in flight holds no events.
func (c *Core) SkipEvents() {
	c.Mu.Lock()
	c.skipEvents = true
	c.Mu.Unlock()
}

// Arm arms the timer of the machine's next deadline, if it has one and
// it is not armed yet.
func (c *Core) Arm() {
	c.Mu.Lock()
	c.rearmLocked()
	c.Mu.Unlock()
}

// Now reads the clock.
func (c *Core) Now() fsm.Instant { return c.clock.Now() }

// Start returns the instant the attempt started.
func (c *Core) Start() fsm.Instant { return c.start }

// FeedLocked feeds e, stamped now when it has no instant, a timeout
// without a phase placed in the current one (TimeoutPhaseLocked). Once
// the attempt is over (its connection no longer in use) events are not
// fed: the machine would ignore them, and the trace stays the decided
// one.
func (c *Core) FeedLocked(e fsm.Event) fsm.Decision {
	if c.sealed || c.m.Decision().Conn != fsm.ConnInUse {
		return c.m.Decision()
	}
	if e.At == 0 {
		e.At = c.clock.Now()
	}
	if e.Kind == fsm.EventTimeout && e.Phase == fsm.PhaseNone {
		e.Phase = c.TimeoutPhaseLocked()
	}
	d := c.m.Step(e)
	switch {
	case c.skipEvents:
	case c.events == nil:
		c.events = make([]fsm.Event, 1, firstEvents)
		c.events[0] = e
	case len(c.events) < MaxEvents:
		c.events = append(c.events, e)
	}
	c.rearmLocked()
	return d
}

// Feed feeds e (see FeedLocked).
func (c *Core) Feed(e fsm.Event) fsm.Decision {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.FeedLocked(e)
}

// StepLocked feeds an event of kind k now.
func (c *Core) StepLocked(k fsm.EventKind) fsm.Decision {
	return c.FeedLocked(fsm.Event{Kind: k})
}

// TimeoutPhaseLocked is the phase a timeout now belongs to. A response
// that completed while the upload still runs is in no phase for
// fsm.Machine.Phase; the timeout is the upload's.
func (c *Core) TimeoutPhaseLocked() fsm.Phase {
	if p := c.m.Phase(); p != fsm.PhaseNone {
		return p
	}
	return fsm.PhaseWrite
}

// HasLocked reports whether the machine established all of f.
func (c *Core) HasLocked(f fsm.Facts) bool { return c.m.Facts()&f == f }

// DecisionLocked returns the latest decision.
func (c *Core) DecisionLocked() fsm.Decision { return c.m.Decision() }

// Request returns the request facts the attempt is decided for.
func (c *Core) Request() fsm.Request {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.m.Request()
}

// Decision returns the latest decision.
func (c *Core) Decision() fsm.Decision {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.m.Decision()
}

// Facts returns what the attempt has established.
func (c *Core) Facts() fsm.Facts {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.m.Facts()
}

// Events returns a copy of the events fed so far.
func (c *Core) Events() []fsm.Event {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return append([]fsm.Event(nil), c.events...)
}

// Stop ends the deadline timer; the Core still answers Decision, Events
// and Trace.
func (c *Core) Stop() {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	c.stopped = true
	if c.stopTimer != nil {
		c.stopTimer()
		c.stopTimer = nil
	}
}

// Seal ends the attempt as its observer sees it: it stops the timer,
// feeds nothing more (a stack's late progress hooks, a write that ends
// after the response did), and returns the decision, the events and the
// trace together, so that the trace replays to exactly that decision.
func (c *Core) Seal() (fsm.Decision, []fsm.Event, string) {
	c.Mu.Lock()
	c.sealed = true
	c.stopped = true
	if c.stopTimer != nil {
		c.stopTimer()
		c.stopTimer = nil
	}
	d, events := c.m.Decision(), append([]fsm.Event(nil), c.events...)
	c.Mu.Unlock()
	return d, events, c.Trace()
}

// Stopped reports whether Stop was called: the attempt is over.
func (c *Core) Stopped() bool {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.stopped
}

// rearmLocked makes the timer match Machine.Deadline.
func (c *Core) rearmLocked() {
	at, ok := c.m.Deadline()
	if c.stopTimer != nil && (!ok || at != c.timerAt || c.stopped) {
		c.stopTimer()
		c.stopTimer = nil
	}
	if !ok || c.stopped || c.stopTimer != nil {
		return
	}
	c.timerAt = at
	c.stopTimer = c.clock.AfterFunc(time.Duration(at-c.clock.Now()), c.tick)
}

// tick feeds EventTick when the deadline timer fires, and calls
// onDeadline when that decided.
func (c *Core) tick() {
	c.Mu.Lock()
	if c.stopped {
		c.Mu.Unlock()
		return
	}
	c.stopTimer = nil
	before, phase, now := c.m.Decision(), c.m.Phase(), c.clock.Now()
	if at, ok := c.m.Deadline(); ok && now < at {
		c.rearmLocked() // early wake-up: the clock and the timer disagree
		c.Mu.Unlock()
		return
	}
	d := c.FeedLocked(fsm.Event{Kind: fsm.EventTick, At: now})
	c.Mu.Unlock()
	if d != before && (d.Action == fsm.ActionFail || d.Conn == fsm.ConnDiscard) && c.onDeadline != nil {
		c.onDeadline.DeadlinePassed(phase)
	}
}

// Trace returns the attempt as a trace in the spec format (see
// docs/explain.md), with instants counted from the attempt's start and the
// latest decision as the final expect line, so that `replaysafe explain`
// replays it to the same decision.
func (c *Core) Trace() string {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	var b strings.Builder
	b.WriteString(c.m.Request().String())
	b.WriteByte('\n')
	var lim []string
	l := c.m.Limits()
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"acquire", l.Acquire}, {"write", l.Write}, {"header", l.Header}, {"body", l.Body}} {
		if p.d > 0 {
			lim = append(lim, p.name+"="+p.d.String())
		}
	}
	if len(lim) > 0 {
		b.WriteString("limits " + strings.Join(lim, " ") + "\n")
	}
	for _, e := range c.events {
		e.At -= c.start
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	if len(c.events) > 0 {
		b.WriteString("expect " + c.m.Decision().String() + "\n")
	}
	return b.String()
}
