package transports

import (
	"errors"
	"io"
	"sync"
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
	rc          io.ReadCloser
	onFirstRead func()
	// guardHandOn makes reads fail once the reader passed to the resend:
	// x/net may still read an abandoned attempt's body late.
	guardHandOn bool

	mu        sync.Mutex
	read      bool
	err       error // the first error other than io.EOF from rc
	stackDone bool  // the stack closed it, or will never touch it again
	callDone  bool  // the call no longer needs it
	owns      bool  // closing rc is this wrapper's job
	handedOn  bool  // rc belongs to the resend now
	closed    bool
}

func newReqBody(rc io.ReadCloser, onFirstRead func(), guardHandOn bool) *reqBody {
	return &reqBody{rc: rc, onFirstRead: onFirstRead, guardHandOn: guardHandOn, owns: true}
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
		b.onFirstRead()
	}
	n, err := b.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// Close is the stack saying it is done with the body.
func (b *reqBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stackDone = true
	return b.maybeCloseLocked()
}

// stackFinished records that the stack will not touch the body again: its
// round trip returned an error, which net/http does only after its write
// loop stopped, or x/net never got the body.
func (b *reqBody) stackFinished() {
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
	finishBody(err error)
}

// respBody is the response body the caller reads. Its end decides the
// connection: EOF feeds EventResponseComplete and may return the
// connection to the pool; a read error feeds the failure; a Close before
// EOF discards the connection (HTTP/1.1) or ends the stream (HTTP/2).
type respBody struct {
	rc io.ReadCloser
	a  bodyFinisher

	once sync.Once
}

// Read reads the response body.
func (b *respBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.finish(err)
	}
	return n, err
}

// Close closes the response body; before EOF it abandons the exchange.
func (b *respBody) Close() error {
	err := b.rc.Close()
	b.finish(errAbandoned)
	return err
}

func (b *respBody) finish(err error) {
	b.once.Do(func() { b.a.finishBody(err) })
}
