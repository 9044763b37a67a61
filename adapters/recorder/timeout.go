package recorder

import (
	"context"
	"fmt"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/route"
)

// TimeoutError is what an attempt is aborted with when one of its phase
// limits passed (the machine's deadline, fsm.Limits), or when the upload
// of its request body stalled. A failure decided this way is a timeout
// (RS06), never resent.
type TimeoutError struct {
	// Phase is the phase that ran out of time.
	Phase fsm.Phase
	// Limit is the configured limit of that phase, or of the stall.
	Limit time.Duration
	// Stall says which side of the upload stalled, or StallNone when the
	// phase limit itself passed.
	Stall Stall
	// Step, for an acquisition through proxies, names the step and hop
	// that was running when the deadline passed (fsm/route); nil
	// otherwise. errors.As finds it too.
	Step *route.DeadlineError
}

// Error names the phase, its limit and the stall, or the step and hop.
func (e *TimeoutError) Error() string {
	switch {
	case e.Step != nil:
		return e.Step.Error()
	case e.Stall == StallProducer:
		return fmt.Sprintf("replaysafe: %s phase timed out: the request body produced nothing for %v", e.Phase, e.Limit)
	case e.Stall == StallTransport:
		return fmt.Sprintf("replaysafe: %s phase timed out: the transport took no request body bytes for %v", e.Phase, e.Limit)
	}
	return fmt.Sprintf("replaysafe: %s phase timed out after %v", e.Phase, e.Limit)
}

// Unwrap returns Step, when the acquisition named one.
func (e *TimeoutError) Unwrap() error {
	if e.Step == nil {
		return nil
	}
	return e.Step
}

// Timeout reports true: TimeoutError is a net.Error timeout.
func (e *TimeoutError) Timeout() bool { return true }

// Temporary reports false; it is part of net.Error.
func (e *TimeoutError) Temporary() bool { return false }

// Is makes errors.Is(err, context.DeadlineExceeded) hold, as for net/http's
// own timeouts.
func (e *TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Stall names the side of a request body upload that stopped making
// progress.
type Stall uint8

// Stalls.
const (
	// StallNone: no stall; a phase limit passed. The zero value.
	StallNone Stall = iota
	// StallProducer: a Read of the caller's request body took longer than
	// its limit (replaysafe's Options.BodyReadTimeout).
	StallProducer
	// StallTransport: the transport took longer than its limit
	// (Options.UploadStallTimeout) to take the next piece of the body, or
	// to finish it (flow control, a full send buffer, a peer not
	// reading).
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
