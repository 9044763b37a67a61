package h1

import (
	"context"
	"errors"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/adapters/informational"
)

// Clock is the monotonic clock a Recorder reads instants from and arms its
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

// maxEvents bounds the events a Recorder keeps for its trace. An attempt
// feeds at most a dozen: every progress event is fed once.
const maxEvents = 64

// inlineEvents is how many events a Recorder keeps without a second
// allocation: a whole exchange, with room for a 1xx and a failure.
const inlineEvents = 12

// Recorder feeds the observations of one HTTP/1.1 wire attempt into an
// fsm.Machine, in the order they happen, and keeps them as a trace. It is
// safe for concurrent use: net/http reports from its read and write loops
// and from the caller's goroutine at once.
//
// The calling contract:
//
//  1. NewRecorder when the attempt starts (before acquiring a connection).
//  2. Acquired, or AcquireFailed, once.
//  3. Attach the Recorder to the connection's Conn (it is the Sink) and
//     pass ClientTrace in the request's context; wrap a request body so its
//     first Read calls BodyRead.
//  4. When the round trip returns: FinalHeaders with a response, Fail with
//     an error. While the response body is read: Complete at its EOF, Fail
//     on a read error, Abandon when it is closed early.
//  5. Act on each returned Decision; call Stop when the attempt is over.
//
// Progress events are fed at most once each, so a duplicate observation
// (GotFirstResponseByte after a read counted the same byte) never reaches
// the machine as an out-of-order event.
type Recorder struct {
	clock      Clock
	onDeadline func(fsm.Phase)
	start      fsm.Instant
	lim        fsm.Limits

	mu         sync.Mutex
	m          fsm.Machine
	events     []fsm.Event
	inline     [inlineEvents]fsm.Event // events' first backing array
	serialized bool                    // WroteRequest(nil) seen; RequestWritten waits for a byte on the wire
	earlyByte  bool                    // a response byte was read before Acquired
	bodyRead   bool                    // EventBodyRead fed
	connErr    error                   // the first read or write error the Conn saw
	stopTimer  func() bool
	timerAt    fsm.Instant
	stopped    bool

	info informational.Counter // the 1xx responses, against their bound
}

// NewRecorder starts the machine for one attempt now. onDeadline, if not
// nil, is called (in the timer's goroutine, without the Recorder's lock)
// when a phase limit passes and the machine failed the attempt or
// discarded its connection because of it: the caller then aborts the
// exchange.
func NewRecorder(req fsm.Request, lim fsm.Limits, clock Clock, onDeadline func(fsm.Phase)) *Recorder {
	now := clock.Now()
	r := &Recorder{clock: clock, onDeadline: onDeadline, start: now, lim: lim, m: fsm.New(req, lim, now)}
	r.events = r.inline[:0]
	r.mu.Lock()
	r.rearmLocked()
	r.mu.Unlock()
	return r
}

// Request returns the request facts the attempt is decided for.
func (r *Recorder) Request() fsm.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m.Request()
}

// Decision returns the latest decision.
func (r *Recorder) Decision() fsm.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m.Decision()
}

// Facts returns what the attempt has established.
func (r *Recorder) Facts() fsm.Facts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m.Facts()
}

// Events returns a copy of the events fed so far.
func (r *Recorder) Events() []fsm.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fsm.Event(nil), r.events...)
}

// Start returns the instant the attempt started.
func (r *Recorder) Start() fsm.Instant { return r.start }

// stepLocked feeds e at the current instant.
func (r *Recorder) stepLocked(k fsm.EventKind) fsm.Decision {
	return r.feedLocked(fsm.Event{Kind: k, At: r.clock.Now()})
}

func (r *Recorder) feedLocked(e fsm.Event) fsm.Decision {
	if r.m.Decision().Conn != fsm.ConnInUse {
		return r.m.Decision() // the attempt is over: the machine ignores it
	}
	d := r.m.Step(e)
	if len(r.events) < maxEvents {
		r.events = append(r.events, e)
	}
	r.rearmLocked()
	return d
}

// timeoutPhaseLocked is the phase a timeout now belongs to. A response
// that completed while the upload still runs is in no phase for
// fsm.Machine.Phase; the timeout is the upload's.
func (r *Recorder) timeoutPhaseLocked() fsm.Phase {
	if p := r.m.Phase(); p != fsm.PhaseNone {
		return p
	}
	return fsm.PhaseWrite
}

// has reports whether the machine established all of f.
func (r *Recorder) hasLocked(f fsm.Facts) bool { return r.m.Facts()&f == f }

// Acquired feeds EventConnAcquired for an HTTP/1.1 connection. A
// response byte the Conn read between Attach and Acquired is fed right
// after it.
func (r *Recorder) Acquired(reused bool) fsm.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.feedLocked(fsm.Event{Kind: fsm.EventConnAcquired, At: r.clock.Now(), Reused: reused, Proto: fsm.ProtoH1})
	if r.earlyByte {
		r.responseByteLocked()
		d = r.m.Decision()
	}
	return d
}

// AcquireFailed feeds the failure to get a connection: a cancellation or a
// timeout when ctx (the caller's context) ended, else
// EventAcquireFailed.
func (r *Recorder) AcquireFailed(ctx context.Context) fsm.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.contextEventLocked(ctx); ok {
		return r.feedLocked(e)
	}
	return r.stepLocked(fsm.EventAcquireFailed)
}

// Wrote implements Sink: a byte reached the wire.
func (r *Recorder) Wrote() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.hasLocked(fsm.FactWroteAny) {
		r.stepLocked(fsm.EventFirstByteWritten)
	}
	r.maybeWrittenLocked()
}

// WriteFailed implements Sink.
func (r *Recorder) WriteFailed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.connErr == nil {
		r.connErr = err
	}
}

// Read implements Sink: a response byte arrived, or the read failed.
func (r *Recorder) Read(n int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n > 0 {
		r.responseByteLocked()
	}
	if err != nil && r.connErr == nil {
		r.connErr = err
	}
}

// BodyRead feeds EventBodyRead the first time the request body is read.
func (r *Recorder) BodyRead() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.bodyRead {
		r.bodyRead = true
		r.stepLocked(fsm.EventBodyRead)
	}
}

// ClientTrace returns the httptrace hooks that feed the Recorder.
func (r *Recorder) ClientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				r.serializedRequest()
			}
		},
		GotFirstResponseByte: func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.responseByteLocked()
		},
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.responseByteLocked()
			if !r.hasLocked(fsm.FactHeaders) {
				r.stepLocked(fsm.EventInformational)
			}
			// The hook's error ends net/http's read of the response:
			// installing it switched off net/http's own bound on 1xx
			// header bytes, so the Counter is the bound.
			return r.info.Add(code, h)
		},
	}
}

// SetInformationalLimit bounds the informational (1xx) responses the
// attempt accepts; without it the attempt takes informational.Limit's
// defaults. Call it before the request is sent. A response over the
// bound fails the round trip with a *informational.LimitError, which Fail
// feeds as EventMalformed.
func (r *Recorder) SetInformationalLimit(l informational.Limit) { r.info.SetLimit(l) }

// InformationalError returns the *informational.LimitError the attempt
// met, or nil.
func (r *Recorder) InformationalError() error { return r.info.Err() }

// serializedRequest records that net/http serialised the whole request.
// It is in net/http's write buffer, not necessarily on the wire yet:
// EventRequestWritten is fed once a byte has also reached the wire.
func (r *Recorder) serializedRequest() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.serialized = true
	r.maybeWrittenLocked()
}

func (r *Recorder) maybeWrittenLocked() {
	if r.serialized && r.hasLocked(fsm.FactWroteAny) && !r.hasLocked(fsm.FactWroteAll) {
		r.stepLocked(fsm.EventRequestWritten)
	}
}

func (r *Recorder) responseByteLocked() {
	switch {
	case !r.hasLocked(fsm.FactAcquired):
		r.earlyByte = true
	case !r.hasLocked(fsm.FactResponseByte):
		r.stepLocked(fsm.EventFirstResponseByte)
	}
}

// FinalHeaders feeds EventFinalHeaders: the round trip returned a
// response.
func (r *Recorder) FinalHeaders() fsm.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.responseByteLocked()
	if r.hasLocked(fsm.FactHeaders) {
		return r.m.Decision()
	}
	return r.stepLocked(fsm.EventFinalHeaders)
}

// Complete feeds EventResponseComplete: the response body reached EOF.
func (r *Recorder) Complete() fsm.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hasLocked(fsm.FactComplete) {
		return r.m.Decision()
	}
	return r.stepLocked(fsm.EventResponseComplete)
}

// Abandon feeds EventCanceled: the caller gave up on the exchange (closed
// the response body before its end).
func (r *Recorder) Abandon() fsm.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stepLocked(fsm.EventCanceled)
}

// Fail classifies err, the error the round trip or the response body
// returned, and feeds the failure it is evidence of. ctx is the caller's
// context; local is the error the caller's request body returned, if any.
//
// In order: the caller's context ended (EventCanceled, or EventTimeout in
// the current phase); the informational responses went over their bound
// (EventMalformed: the server's response is unacceptable, whatever
// net/http did with the connection since); err is the request body's own error
// (EventLocalFailure); Classify(err);
// Classify of the read or write error the Conn saw; EventMalformed when a
// response byte arrived (net/http's parse errors are untyped); else a local
// failure, fed as EventCanceled.
func (r *Recorder) Fail(err error, ctx context.Context, local error) fsm.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.contextEventLocked(ctx); ok {
		return r.feedLocked(e)
	}
	if r.info.Err() != nil {
		return r.stepLocked(fsm.EventMalformed)
	}
	if local != nil && errors.Is(err, local) {
		return r.stepLocked(fsm.EventLocalFailure)
	}
	k, ok := Classify(err)
	if !ok {
		k, ok = Classify(r.connErr)
	}
	switch {
	case ok && k == fsm.EventTimeout:
		return r.feedLocked(fsm.Event{Kind: k, At: r.clock.Now(), Phase: r.timeoutPhaseLocked()})
	case ok:
		return r.stepLocked(k)
	case r.hasLocked(fsm.FactResponseByte):
		return r.stepLocked(fsm.EventMalformed)
	}
	return r.stepLocked(fsm.EventCanceled)
}

// contextEventLocked returns the event for a caller's context that ended.
func (r *Recorder) contextEventLocked(ctx context.Context) (fsm.Event, bool) {
	if ctx == nil {
		return fsm.Event{}, false
	}
	switch err := ctx.Err(); {
	case err == nil:
		return fsm.Event{}, false
	case errors.Is(err, context.DeadlineExceeded):
		return fsm.Event{Kind: fsm.EventTimeout, At: r.clock.Now(), Phase: r.timeoutPhaseLocked()}, true
	}
	return fsm.Event{Kind: fsm.EventCanceled, At: r.clock.Now()}, true
}

// Stop ends the attempt's deadline timer. The Recorder still answers
// Decision and Events.
func (r *Recorder) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.stopTimer != nil {
		r.stopTimer()
		r.stopTimer = nil
	}
}

// rearmLocked makes the timer match Machine.Deadline.
func (r *Recorder) rearmLocked() {
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

// tick feeds EventTick when the deadline timer fires.
func (r *Recorder) tick() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopTimer = nil
	before := r.m.Decision()
	phase := r.m.Phase()
	now := r.clock.Now()
	if at, ok := r.m.Deadline(); ok && now < at {
		r.rearmLocked() // early wake-up: the clock and the timer disagree
		r.mu.Unlock()
		return
	}
	d := r.feedLocked(fsm.Event{Kind: fsm.EventTick, At: now})
	r.mu.Unlock()
	if d != before && (d.Action == fsm.ActionFail || d.Conn == fsm.ConnDiscard) && r.onDeadline != nil {
		r.onDeadline(phase)
	}
}

// Trace returns the attempt as a trace in the spec format (see
// docs/explain.md), with instants counted from the attempt's start and the
// latest decision as the final expect line, so that `replaysafe explain`
// replays it to the same decision.
func (r *Recorder) Trace() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString(r.m.Request().String())
	b.WriteByte('\n')
	if l := limitsLine(r.lim); l != "" {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	for _, e := range r.events {
		e.At -= r.start
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	if len(r.events) > 0 {
		b.WriteString("expect ")
		b.WriteString(r.m.Decision().String())
		b.WriteByte('\n')
	}
	return b.String()
}

// limitsLine prints the non-zero limits as a trace "limits" line, or "".
func limitsLine(l fsm.Limits) string {
	s := ""
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"acquire", l.Acquire}, {"write", l.Write}, {"header", l.Header}, {"body", l.Body}} {
		if p.d > 0 {
			s += " " + p.name + "=" + p.d.String()
		}
	}
	if s == "" {
		return ""
	}
	return "limits" + s
}
