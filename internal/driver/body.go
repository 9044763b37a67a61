package driver

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
)

// errBodyHandedOn is what a read of an HTTP/2 attempt's request body
// returns once the caller's reader passed to the resend.
var errBodyHandedOn = errors.New("replaysafe: request body passed to the resend")

// reqBody is the request body one wire attempt hands to the stack (net/http
// or x/net). It reports the first Read, remembers the caller's reader's own
// error, and defers closing the caller's reader: both stacks close the body
// of a failed attempt (x/net even of one it never wrote), but an untouched
// one-shot reader must survive for the resend, and the caller's reader must
// not be closed while the stack still reads it.
type reqBody struct {
	rc    io.ReadCloser
	first firstReadee // told of the first Read
	// guardHandOn makes reads fail once the reader passed to the resend:
	// x/net may still read an abandoned attempt's body late.
	guardHandOn bool

	// stall watches the upload's progress; nil without stall limits.
	stall *stallWatch

	mu        sync.Mutex
	read      bool
	err       error // the first error other than io.EOF from rc
	stackDone bool  // the stack closed it, or will never touch it again
	callDone  bool  // the call no longer needs it
	owns      bool  // closing rc is this wrapper's job
	handedOn  bool  // rc belongs to the resend now
	closed    bool
}

// firstReadee is told of a request body's first Read (the attempt's
// recorder). An interface, not a func: a method value would be one more
// allocation per attempt with a body.
type firstReadee interface{ BodyRead() }

// staller is told of a stall that passed its limit (the attempt).
type staller interface{ stalled(*recorder.TimeoutError) }

// init starts b, a zero reqBody, on the caller's reader rc.
func (b *reqBody) init(rc io.ReadCloser, first firstReadee, guardHandOn bool) {
	b.rc, b.first, b.guardHandOn, b.owns = rc, first, guardHandOn, true
}

// Read reads from the caller's body, unless it passed to the resend.
func (b *reqBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.handedOn && b.guardHandOn {
		b.mu.Unlock()
		return 0, errBodyHandedOn
	}
	first := !b.read
	b.read = true
	b.mu.Unlock()
	if first {
		b.first.BodyRead()
	}
	b.stall.arm(recorder.StallProducer)
	n, err := b.rc.Read(p)
	if te := b.stall.producerFired(); te != nil {
		n, err = 0, te // the read came too late: end the upload, not the body
	}
	switch {
	case err == nil:
		b.stall.arm(recorder.StallTransport)
	case errors.Is(err, io.EOF) && b.stall.untilWritten():
		b.stall.arm(recorder.StallTransport) // until the stack finished the body
	default:
		b.stall.disarm()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// watchStalls bounds each Read of the caller's body by read and the
// stack's taking of each piece (and, with finish set, of the end of the
// body, until uploaded is called) by progress; zero means no limit. When
// one passes, s is told on a timer goroutine with the TimeoutError.
func (b *reqBody) watchStalls(clock recorder.Clock, read, progress time.Duration, s staller, finish bool) {
	if read <= 0 && progress <= 0 {
		return
	}
	b.stall = &stallWatch{clock: clock, read: read, progress: progress, onStall: s, finish: finish}
}

// uploaded records that the stack finished the body, or gave up on it.
func (b *reqBody) uploaded() { b.stall.disarm() }

// Close is the stack saying it is done with the body.
func (b *reqBody) Close() error {
	b.stall.disarm()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stackDone = true
	return b.maybeCloseLocked()
}

// stackFinished records that the stack will not touch the body again: its
// round trip returned an error, which net/http does only after its write
// loop stopped, or x/net never got the body.
func (b *reqBody) stackFinished() {
	b.stall.disarm()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stackDone = true
	b.maybeCloseLocked()
}

// release records that the call is done with this attempt's body. With
// keep set the caller's reader passes, unclosed, to the resend, which
// closes it.
func (b *reqBody) release(keep bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.callDone = true
	if keep {
		b.owns, b.handedOn = false, true
	}
	b.maybeCloseLocked()
}

// readErr returns the caller's reader's own error, if it failed.
func (b *reqBody) readErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *reqBody) maybeCloseLocked() error {
	if !b.stackDone || !b.callDone || !b.owns || b.closed {
		return nil
	}
	b.closed = true
	return b.rc.Close()
}

// errAbandoned marks a response body closed before its end.
var errAbandoned = errors.New("replaysafe: response body closed before its end")

// bodyFinisher is the attempt a response body reports its end to.
type bodyFinisher interface {
	finishBody(err error) error
	// abandon ends the attempt's context: the caller closed the body
	// before its end.
	abandon()
}

// respBody is the response body the caller reads. Its end decides the
// connection: EOF feeds EventResponseComplete and may return the
// connection to the pool; a read error feeds the failure; a Close before
// EOF discards the connection (HTTP/1.1) or ends the stream (HTTP/2).
type respBody struct {
	rc io.ReadCloser
	a  bodyFinisher

	once   sync.Once
	failed error // what a Read that failed returns, once the failure is decided
}

// Read reads the response body. A read that fails (not io.EOF) returns
// the attempt's decided failure, naming its rule and wrapping the
// stack's error, then and on every later Read.
func (b *respBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.finish(err)
		if err != io.EOF && b.failed != nil {
			err = b.failed
		}
	}
	return n, err
}

// Close closes the response body; before EOF it abandons the exchange.
// It ends the attempt's context before the stack's Close: x/net's waits
// for the request's writer, which may be blocked reading the caller's
// body, until that context ends.
func (b *respBody) Close() error {
	abandoned := false
	b.once.Do(func() {
		abandoned = true
		b.a.abandon()
	})
	err := b.rc.Close()
	if abandoned {
		b.a.finishBody(errAbandoned)
	}
	return err
}

func (b *respBody) finish(err error) {
	b.once.Do(func() { b.failed = b.a.finishBody(err) })
}

// stallWatch is a request body's stall timer: at most one of its two
// limits is armed at a time. A nil *stallWatch watches nothing.
type stallWatch struct {
	clock          recorder.Clock
	read, progress time.Duration
	onStall        staller
	finish         bool // the transport's end of the body is watched too

	mu    sync.Mutex
	stop  func() bool
	gen   uint64                 // arming count: a timer of an older arming is void
	fired *recorder.TimeoutError // the producer stall that fired, if any
	off   bool                   // disarmed for good
}

// arm starts the timer of stall s, replacing the one running.
func (w *stallWatch) arm(s recorder.Stall) {
	if w == nil {
		return
	}
	limit := w.read
	if s == recorder.StallTransport {
		limit = w.progress
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked()
	if w.off || limit <= 0 {
		return
	}
	gen := w.gen
	e := &recorder.TimeoutError{Phase: fsm.PhaseWrite, Limit: limit, Stall: s}
	w.stop = w.clock.AfterFunc(limit, func() { w.expired(gen, e) })
}

func (w *stallWatch) stopLocked() {
	w.gen++
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
}

func (w *stallWatch) expired(gen uint64, e *recorder.TimeoutError) {
	w.mu.Lock()
	if gen != w.gen || w.off {
		w.mu.Unlock()
		return
	}
	w.stop = nil
	if e.Stall == recorder.StallProducer {
		w.fired = e
	}
	w.off = true
	w.mu.Unlock()
	w.onStall.stalled(e)
}

// producerFired returns the producer stall that fired, if any.
func (w *stallWatch) producerFired() *recorder.TimeoutError {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}

// untilWritten reports whether the end of the body is watched.
func (w *stallWatch) untilWritten() bool { return w != nil && w.finish }

// disarm stops the watch for good.
func (w *stallWatch) disarm() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked()
	w.off = true
}
