package transports

import (
	"errors"
	"io"
	"sync"

	"github.com/replaysafe/replaysafe/adapters/h1"
)

// reqBody is the request body one wire attempt hands to net/http. It
// reports the first Read to the attempt's Recorder, remembers the
// caller's reader's own error, and defers closing the caller's reader:
// net/http closes the body of a failed attempt, but an untouched one-shot
// reader must survive for the resend, and the caller's reader must not be
// closed while net/http still reads it.
type reqBody struct {
	rc  io.ReadCloser
	rec *h1.Recorder

	mu        sync.Mutex
	read      bool
	err       error // the first error other than io.EOF from rc
	stackDone bool  // net/http closed it, or will never touch it again
	callDone  bool  // the call no longer needs it
	owns      bool  // closing rc is this wrapper's job
	closed    bool
}

func newReqBody(rc io.ReadCloser, rec *h1.Recorder) *reqBody {
	return &reqBody{rc: rc, rec: rec, owns: true}
}

// Read reads from the caller's body.
func (b *reqBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	first := !b.read
	b.read = true
	b.mu.Unlock()
	if first {
		b.rec.BodyRead()
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

// Close is net/http saying it is done with the body.
func (b *reqBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stackDone = true
	return b.maybeCloseLocked()
}

// stackFinished records that net/http will not touch the body again: its
// round trip returned an error, which it does only after its write loop
// stopped.
func (b *reqBody) stackFinished() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stackDone = true
	b.maybeCloseLocked()
}

// release records that the call is done with this attempt's body. With
// keep set the caller's reader passes to the resend, which closes it.
func (b *reqBody) release(keep bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.callDone = true
	if keep {
		b.owns = false
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

// respBody is the response body the caller reads. Its end decides the
// connection: EOF feeds EventResponseComplete and may return the
// connection to the pool; a read error feeds the failure; a Close before
// EOF discards the connection.
type respBody struct {
	rc io.ReadCloser
	a  *attempt

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

// Close closes the response body; before EOF it discards the connection.
func (b *respBody) Close() error {
	err := b.rc.Close()
	b.finish(errAbandoned)
	return err
}

func (b *respBody) finish(err error) {
	b.once.Do(func() { b.a.finishBody(err) })
}
