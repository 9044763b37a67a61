package replaysafe

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// Error is the error a call returns when replaysafe gives up on it: the
// rule that decided, how many wire attempts were made, and the cause.
type Error struct {
	// Rule is the rule that decided the final failure, such as
	// fsm.RuleAmbiguousNotIdempotent (RS18).
	Rule fsm.Rule
	// Attempts is the number of wire attempts the call made: 1, or 2 when
	// the failure hit the resend.
	Attempts int
	// Err is the cause: the stack's error, classified into the event the
	// rule decided on.
	Err error
}

// Error names the cause, the rule by ID and slug, and the attempt count.
func (e *Error) Error() string {
	s := "s"
	if e.Attempts == 1 {
		s = ""
	}
	// One prefix: a cause of this package's own already names it.
	cause := strings.TrimPrefix(fmt.Sprint(e.Err), "replaysafe: ")
	return fmt.Sprintf("replaysafe: %s (%s %s, %d attempt%s)", cause, e.Rule.ID(), e.Rule, e.Attempts, s)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Timeout reports whether the call failed because a phase ran out of
// time, so that net/http's url.Error reports a timeout too.
func (e *Error) Timeout() bool {
	if e.Rule == fsm.RuleTimeout {
		return true
	}
	t, ok := e.Err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}

// TimeoutError is the cause of a failure decided because one of the
// Options' phase limits passed, or because the upload of the request body
// stalled (Options.BodyReadTimeout, Options.UploadStallTimeout).
type TimeoutError struct {
	// Phase is the phase that ran out of time.
	Phase fsm.Phase
	// Limit is the configured limit of that phase, or of the stall.
	Limit time.Duration
	// Stall says which side of the upload stalled, or StallNone when the
	// phase limit itself passed.
	Stall Stall
}

// Error names the phase, its limit and the stall, if any.
func (e *TimeoutError) Error() string {
	switch e.Stall {
	case StallProducer:
		return fmt.Sprintf("replaysafe: %s phase timed out: the request body produced nothing for %v", e.Phase, e.Limit)
	case StallTransport:
		return fmt.Sprintf("replaysafe: %s phase timed out: the transport took no request body bytes for %v", e.Phase, e.Limit)
	}
	return fmt.Sprintf("replaysafe: %s phase timed out after %v", e.Phase, e.Limit)
}

// Stall names the side of a request body upload that stopped making
// progress.
type Stall uint8

// Stalls.
const (
	// StallNone: no stall; a phase limit passed. The zero value.
	StallNone Stall = iota
	// StallProducer: a Read of the caller's request body took longer than
	// Options.BodyReadTimeout.
	StallProducer
	// StallTransport: the transport took longer than
	// Options.UploadStallTimeout to take the next piece of the body, or to
	// finish it (flow control, a full send buffer, a peer not reading).
	StallTransport

	stallCount // number of stalls; keep last
)

var stallNames = [stallCount]string{"none", "producer", "transport"}

// String returns the stall's name: none, producer or transport.
func (s Stall) String() string {
	if s < stallCount {
		return stallNames[s]
	}
	return fmt.Sprintf("Stall(%d)", uint8(s))
}

// Timeout reports true: TimeoutError is a net.Error timeout.
func (e *TimeoutError) Timeout() bool { return true }

// Temporary reports false; it is part of net.Error.
func (e *TimeoutError) Temporary() bool { return false }

// Is makes errors.Is(err, context.DeadlineExceeded) hold, as for net/http's
// own timeouts.
func (e *TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }
