package replaysafe

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/adapters/h1"
)

// maxEvents bounds the events a streamRec keeps for its trace; an attempt
// feeds about a dozen.
const maxEvents = 64

// inlineEvents is how many events a streamRec keeps without a second
// allocation: a whole exchange, with room for a 1xx and a failure.
const inlineEvents = 12

// streamRec feeds one HTTP/2 or HTTP/3 wire attempt's events into an
// fsm.Machine and keeps them as a trace. The adapter's Attempt
// (internal/adapters/h2, internal/adapters/h3) produces the progress events (from the
// stack's httptrace hooks, on the stack's goroutines) and the failure
// event (from the error and what the adapter watched); streamRec stamps,
// deduplicates and orders nothing else. It is safe for concurrent use.
type streamRec struct {
	clock      h1.Clock
	lim        fsm.Limits
	onDeadline func(fsm.Phase)
	start      fsm.Instant

	mu        sync.Mutex
	m         fsm.Machine
	events    []fsm.Event
	inline    [inlineEvents]fsm.Event // events' first backing array
	stopTimer func() bool
	timerAt   fsm.Instant
	stopped   bool
}

func newStreamRec(req fsm.Request, lim fsm.Limits, clock h1.Clock, onDeadline func(fsm.Phase)) *streamRec {
	now := clock.Now()
	r := &streamRec{clock: clock, lim: lim, onDeadline: onDeadline, start: now, m: fsm.New(req, lim, now)}
	r.events = r.inline[:0]
	r.mu.Lock()
	r.rearmLocked()
	r.mu.Unlock()
	return r
}

// emit is the internal/adapters/h2 Attempt's event sink: progress events, fed at
// most once each.
func (r *streamRec) emit(e fsm.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var f fsm.Facts
	switch e.Kind {
	case fsm.EventFirstByteWritten:
		f = fsm.FactWroteAny
	case fsm.EventRequestWritten:
		f = fsm.FactWroteAll
	case fsm.EventFirstResponseByte:
		f = fsm.FactResponseByte
	case fsm.EventInformational:
		if r.hasLocked(fsm.FactHeaders) {
			return
		}
	}
	if f != 0 && r.hasLocked(f) {
		return
	}
	r.feedLocked(e)
}

// feed stamps e (when it has no instant) and feeds it.
func (r *streamRec) feed(e fsm.Event) fsm.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.feedLocked(e)
}

func (r *streamRec) feedLocked(e fsm.Event) fsm.Decision {
	if r.m.Decision().Conn != fsm.ConnInUse {
		return r.m.Decision() // the attempt is over
	}
	if e.At == 0 {
		e.At = r.clock.Now()
	}
	if e.Kind == fsm.EventTimeout && e.Phase == fsm.PhaseNone {
		e.Phase = r.m.Phase()
		if e.Phase == fsm.PhaseNone {
			e.Phase = fsm.PhaseWrite
		}
	}
	d := r.m.Step(e)
	if len(r.events) < maxEvents {
		r.events = append(r.events, e)
	}
	r.rearmLocked()
	return d
}

func (r *streamRec) hasLocked(f fsm.Facts) bool { return r.m.Facts()&f == f }

// bodyRead feeds EventBodyRead, once.
func (r *streamRec) bodyRead() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.hasLocked(fsm.FactBodyRead) {
		r.feedLocked(fsm.Event{Kind: fsm.EventBodyRead})
	}
}

// finalHeaders feeds EventFinalHeaders, after the response byte it
// implies when x/net's hook has not reported it yet.
func (r *streamRec) finalHeaders() fsm.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.hasLocked(fsm.FactResponseByte) {
		r.feedLocked(fsm.Event{Kind: fsm.EventFirstResponseByte})
	}
	return r.feedLocked(fsm.Event{Kind: fsm.EventFinalHeaders})
}

// contextEvent returns the event for ctx, the caller's context, when it
// ended.
func contextEvent(ctx context.Context) (fsm.Event, bool) {
	switch err := ctx.Err(); {
	case err == nil:
		return fsm.Event{}, false
	case errors.Is(err, context.DeadlineExceeded):
		return fsm.Event{Kind: fsm.EventTimeout}, true
	}
	return fsm.Event{Kind: fsm.EventCanceled}, true
}

// Request returns the request facts the machine decides on.
func (r *streamRec) Request() fsm.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m.Request()
}

func (r *streamRec) facts() fsm.Facts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m.Facts()
}

// Events returns the events fed so far.
func (r *streamRec) Events() []fsm.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fsm.Event(nil), r.events...)
}

// isStopped reports whether stop was called: the attempt is over.
func (r *streamRec) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// stop ends the deadline timer.
func (r *streamRec) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.stopTimer != nil {
		r.stopTimer()
		r.stopTimer = nil
	}
}

// rearmLocked makes the timer match Machine.Deadline.
func (r *streamRec) rearmLocked() {
	at, ok := r.m.Deadline()
	if r.stopTimer != nil && (!ok || at != r.timerAt || r.stopped) {
		r.stopTimer()
		r.stopTimer = nil
	}
	if !ok || r.stopped || r.stopTimer != nil {
		return
	}
	r.timerAt = at
	r.stopTimer = r.clock.AfterFunc(time.Duration(at-r.clock.Now()), r.tick)
}

// tick feeds EventTick when the deadline passes and aborts the attempt
// when the machine failed it.
func (r *streamRec) tick() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopTimer = nil
	before, phase, now := r.m.Decision(), r.m.Phase(), r.clock.Now()
	if at, ok := r.m.Deadline(); ok && now < at {
		r.rearmLocked()
		r.mu.Unlock()
		return
	}
	d := r.feedLocked(fsm.Event{Kind: fsm.EventTick, At: now})
	r.mu.Unlock()
	if d != before && (d.Action == fsm.ActionFail || d.Conn == fsm.ConnDiscard) && r.onDeadline != nil {
		r.onDeadline(phase)
	}
}

// Trace returns the attempt in the spec trace format, instants counted
// from the attempt's start, ending with the latest decision.
func (r *streamRec) Trace() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString(r.m.Request().String())
	b.WriteByte('\n')
	var lim []string
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"acquire", r.lim.Acquire}, {"write", r.lim.Write}, {"header", r.lim.Header}, {"body", r.lim.Body}} {
		if p.d > 0 {
			lim = append(lim, p.name+"="+p.d.String())
		}
	}
	if len(lim) > 0 {
		b.WriteString("limits " + strings.Join(lim, " ") + "\n")
	}
	for _, e := range r.events {
		e.At -= r.start
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	if len(r.events) > 0 {
		b.WriteString("expect " + r.m.Decision().String() + "\n")
	}
	return b.String()
}
