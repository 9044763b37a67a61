package h1

import (
	"context"
	"fmt"
	"time"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
)

// HeaderTimeoutError is what an attempt fails with when a response
// header section, once its first byte had arrived, did not end within
// its bound (Recorder.BoundHeaderSections): a server that dribbles its
// status line or header fields. The failure is a timeout (RS06), never
// resent. errors.Is(err, context.DeadlineExceeded) holds for it.
type HeaderTimeoutError struct {
	// Limit is the bound.
	Limit time.Duration
	// Interim is the number of informational (1xx) header sections that
	// ended before the one that timed out.
	Interim int
}

// Error names the bound.
func (e *HeaderTimeoutError) Error() string {
	return fmt.Sprintf("h1: response header section did not end within %v of its first byte", e.Limit)
}

// Timeout reports true: HeaderTimeoutError is a net.Error timeout.
func (e *HeaderTimeoutError) Timeout() bool { return true }

// Temporary reports false; it is part of net.Error.
func (e *HeaderTimeoutError) Temporary() bool { return false }

// Is makes errors.Is(err, context.DeadlineExceeded) hold.
func (e *HeaderTimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// HeaderAborter aborts an exchange whose response header section
// outlived its bound (see Recorder.BoundHeaderSections).
type HeaderAborter interface {
	// HeaderSectionTimedOut is called in the timer's goroutine, without
	// the Recorder's lock, once the machine failed the attempt because
	// of err: the caller closes the connection (net/http's read of the
	// response then fails) and fails the round trip with err.
	HeaderSectionTimedOut(err *HeaderTimeoutError)
}

// headerBound is a Recorder's bound on each response header section:
// from the section's first byte to its end (an informational response
// parsed, or the final header section).
type headerBound struct {
	limit time.Duration // zero: unbounded
	clock recorder.Clock
	abort HeaderAborter

	open    bool        // a section's first byte arrived and its end did not
	at      fsm.Instant // when it did
	done    bool        // the final section arrived, or the attempt is over
	interim int         // informational sections that ended
	gen     uint64      // counts the timers armed, so a late one does nothing
	stop    func() bool
	err     *HeaderTimeoutError
}

// BoundHeaderSections bounds each response header section of the
// attempt: once a byte of one has arrived, the section must end within
// limit, each informational (1xx) response ending one and the next
// starting with the next byte read. Past the bound the machine is fed a
// timeout (RS06) and abort is told. A section already under way counts
// from its first byte. Call it once, once the Recorder is attached to
// the connection abort closes; a zero or negative limit does nothing.
//
// The timer is armed only when a section does not arrive in one read:
// as the connection's Conn begins the next read while the section is
// under way (the Recorder learns it only as the Conn's Sink).
//
// Bytes of the next section that arrived in the same read as the end of
// an informational response start its bound only at the next read that
// returns bytes.
func (r *Recorder) BoundHeaderSections(limit time.Duration, clock recorder.Clock, abort HeaderAborter) {
	if limit <= 0 {
		return
	}
	r.Mu.Lock()
	defer r.Mu.Unlock()
	h := &r.header
	h.limit, h.clock, h.abort = limit, clock, abort
	if h.open {
		r.armHeaderLocked()
	}
}

// HeaderSectionError returns the *HeaderTimeoutError the attempt met,
// or nil.
func (r *Recorder) HeaderSectionError() error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.header.err == nil {
		return nil
	}
	return r.header.err
}

// headerByteLocked notes a response byte: the first of a header section
// starts its bound.
func (r *Recorder) headerByteLocked() {
	h := &r.header
	if h.open || h.done || r.HasLocked(fsm.FactHeaders) {
		return
	}
	h.open, h.at = true, r.Now()
}

// reading notes that a Read of the connection begins. A header section
// under way then did not arrive whole in the reads so far, and its bound
// is armed, counting from its first byte: most sections arrive in one
// read and end before the next, and never need the timer.
func (r *Recorder) reading() {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if h := &r.header; h.open && h.stop == nil && h.limit > 0 {
		r.armHeaderLocked()
	}
}

// headerEndLocked ends the section under way; final says it was the
// final one (or the attempt is over), after which nothing is bounded.
func (r *Recorder) headerEndLocked(final bool) {
	h := &r.header
	if h.open && !final {
		h.interim++
	}
	h.open = false
	h.done = h.done || final
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

func (r *Recorder) armHeaderLocked() {
	h := &r.header
	h.gen++
	gen := h.gen
	wait := time.Duration(h.at+fsm.Instant(h.limit)) - time.Duration(r.Now())
	h.stop = h.clock.AfterFunc(max(wait, 0), func() { r.headerExpired(gen) })
}

// headerExpired is the bound's timer: the section under way did not end
// in time.
func (r *Recorder) headerExpired(gen uint64) {
	r.Mu.Lock()
	h := &r.header
	if gen != h.gen || !h.open || h.done {
		r.Mu.Unlock()
		return
	}
	h.stop, h.open, h.done = nil, false, true
	before := r.DecisionLocked()
	d := r.FeedLocked(fsm.Event{Kind: fsm.EventTimeout, At: r.Now(), Phase: r.TimeoutPhaseLocked()})
	decided := d != before && d.Action == fsm.ActionFail
	if decided {
		h.err = &HeaderTimeoutError{Limit: h.limit, Interim: h.interim}
	}
	err, abort := h.err, h.abort
	r.Mu.Unlock()
	if decided && abort != nil {
		abort.HeaderSectionTimedOut(err)
	}
}

// Stop ends the attempt's timers: the phase deadline's and the header
// section bound's.
func (r *Recorder) Stop() {
	r.Mu.Lock()
	r.headerEndLocked(true)
	r.Mu.Unlock()
	r.Core.Stop()
}
