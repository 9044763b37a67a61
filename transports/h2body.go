package transports

import (
	"errors"
	"io"
	"sync"
)

// errBodyHandedOn is what a read of an HTTP/2 attempt's request body
// returns once the caller's reader passed to the resend.
var errBodyHandedOn = errors.New("replaysafe: request body passed to the resend")

// h2ReqBody is the request body an HTTP/2 attempt hands to x/net. x/net
// closes Request.Body whenever a request fails, even one it never wrote;
// this wrapper keeps that Close from reaching the caller's reader, so an
// untouched one-shot body can be handed to the resend as it was. It
// reports the first Read, and remembers the reader's own error.
type h2ReqBody struct {
	rc  io.ReadCloser
	rec *h2Rec

	mu        sync.Mutex
	read      bool
	err       error
	stackDone bool // x/net closed it, or never got it
	callDone  bool // the call no longer needs it
	owns      bool // closing rc is this wrapper's job
	handedOn  bool // rc belongs to the resend now
	closed    bool
}

func newH2ReqBody(rc io.ReadCloser, rec *h2Rec) *h2ReqBody {
	return &h2ReqBody{rc: rc, rec: rec, owns: true}
}

// Read reads from the caller's body, unless it passed to the resend.
func (b *h2ReqBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.handedOn {
		b.mu.Unlock()
		return 0, errBodyHandedOn
	}
	first := !b.read
	b.read = true
	b.mu.Unlock()
	if first {
		b.rec.bodyRead()
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

// Close is x/net saying it is done with the body.
func (b *h2ReqBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stackDone = true
	return b.maybeCloseLocked()
}

// stackFinished records that x/net never got the body.
func (b *h2ReqBody) stackFinished() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stackDone = true
	b.maybeCloseLocked()
}

// release records that the call is done with this attempt's body; with
// keep the caller's reader passes, unclosed and unread, to the resend.
func (b *h2ReqBody) release(keep bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.callDone = true
	if keep {
		b.owns, b.handedOn = false, true
	}
	b.maybeCloseLocked()
}

func (b *h2ReqBody) readErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *h2ReqBody) maybeCloseLocked() error {
	if !b.stackDone || !b.callDone || !b.owns || b.closed {
		return nil
	}
	b.closed = true
	return b.rc.Close()
}

// h2RespBody is the response body the caller reads: its end feeds the
// machine and ends the stream's attempt.
type h2RespBody struct {
	rc   io.ReadCloser
	a    *h2Attempt
	once sync.Once
}

func (b *h2RespBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.once.Do(func() { b.a.finishBody(err) })
	}
	return n, err
}

func (b *h2RespBody) Close() error {
	err := b.rc.Close()
	b.once.Do(func() { b.a.finishBody(errAbandoned) })
	return err
}
