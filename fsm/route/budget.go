package route

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -linecomment -type Step,Scheme,ProxyKind,Policy -output enum_string.go

import (
	"math"
	"strconv"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
)

// Step names a part of connection acquisition.
type Step uint8

// Steps, in the order an acquisition runs them. The per-hop steps repeat
// for every proxy of the chain.
// The line comment after each constant is its String (stringer -linecomment).
const (
	// StepNone is the zero value: no step.
	StepNone Step = iota // none
	// StepWaitCapacity is waiting for another attempt's connection or for
	// pool capacity.
	StepWaitCapacity // wait-capacity
	// StepDNS is resolving the first hop's host (the origin's when direct).
	StepDNS // dns
	// StepTCP is connecting to the first hop (the origin when direct).
	StepTCP // tcp
	// StepProxyTLS is the TLS handshake with an HTTPS proxy (per hop).
	StepProxyTLS // tls-to-proxy
	// StepConnect is the CONNECT exchange with an HTTP or HTTPS proxy (per
	// hop).
	StepConnect // connect
	// StepSOCKS is the SOCKS5 negotiation (per hop).
	StepSOCKS // socks
	// StepOriginTLS is the TLS handshake with the origin, inside the tunnel
	// when proxied.
	StepOriginTLS // tls-to-origin
)

const stepCount = StepOriginTLS + 1

// ParseStep is the inverse of Step.String; "none" does not parse.
func ParseStep(s string) (Step, bool) { return fsm.ParseEnum(s, stepCount, false) }

// PerHop reports whether the step runs once for every proxy hop.
func (s Step) PerHop() bool { return s == StepProxyTLS || s == StepConnect || s == StepSOCKS }

// Budget is the one absolute deadline of a connection acquisition. It
// starts on a pool miss and covers every step up to the TLS handshake with
// the origin; it is a small value, safe to copy. The zero Budget started
// at instant 0 without a limit.
type Budget struct {
	start Instant
	limit time.Duration // ≤ 0: no limit
}

// Start begins a budget at now that runs out limit later. A limit of
// zero or less means no limit.
func Start(now Instant, limit time.Duration) Budget {
	if limit < 0 {
		limit = 0
	}
	return Budget{start: now, limit: limit}
}

// Renew returns a new budget with the same limit, started at now: the
// budget of a fresh acquisition after a stale pooled connection.
func (b Budget) Renew(now Instant) Budget { return Start(now, b.limit) }

// Started returns the instant the budget began.
func (b Budget) Started() Instant { return b.start }

// Limit returns the budget's length; zero means no limit.
func (b Budget) Limit() time.Duration { return b.limit }

// Limited reports whether the budget has a limit.
func (b Budget) Limited() bool { return b.limit > 0 }

// Deadline returns the instant the budget runs out; ok is false without a
// limit. A deadline past the end of the clock is clamped to its end.
func (b Budget) Deadline() (deadline Instant, ok bool) {
	if b.limit <= 0 {
		return 0, false
	}
	if b.start > Instant(math.MaxInt64-int64(b.limit)) {
		return Instant(math.MaxInt64), true
	}
	return b.start.Add(b.limit), true
}

// Elapsed returns the time from the budget's start to now, or zero if
// now is before the start.
func (b Budget) Elapsed(now Instant) time.Duration {
	if now <= b.start {
		return 0
	}
	return time.Duration(now - b.start)
}

// Remaining returns how much of the budget is left at now: zero once it
// has run out; ok is false without a limit, and remaining is then zero
// and means nothing.
func (b Budget) Remaining(now Instant) (remaining time.Duration, ok bool) {
	d, ok := b.Deadline()
	if !ok {
		return 0, false
	}
	if now >= d {
		return 0, true
	}
	return time.Duration(d - now), true
}

// Expired reports whether the budget has run out at now. It runs out at
// its deadline exactly: no time is left then.
func (b Budget) Expired(now Instant) bool {
	d, ok := b.Deadline()
	return ok && now >= d
}

// Check decides whether step (at hop, see DeadlineError.Hop) may start or
// go on at now. It returns nil while time is left, and a *DeadlineError
// naming the step once the budget has run out: the step must then be
// abandoned.
func (b Budget) Check(now Instant, step Step, hop int) error {
	if !b.Expired(now) {
		return nil
	}
	return b.Exceeded(now, step, hop, nil)
}

// Exceeded returns the error for step (at hop) abandoned at now because
// the budget ran out, wrapping cause, the error the step failed with (nil
// if it never started). It does not check that the budget has run out;
// Expired and Check do.
func (b Budget) Exceeded(now Instant, step Step, hop int, cause error) *DeadlineError {
	return &DeadlineError{Step: step, Hop: hop, Elapsed: b.Elapsed(now), Limit: b.limit, Cause: cause}
}

// DeadlineError reports that connection acquisition ran out of its budget
// during a step. It is a timeout, not the peer's fault.
type DeadlineError struct {
	Step Step
	// Hop is the 1-based position in the chain of the proxy the step was
	// dealing with: always set for per-hop steps, and set to 1 for DNS and
	// TCP when they reach the first proxy. It is 0 for steps that concern
	// the pool or the origin.
	Hop int
	// Elapsed is the time from the budget's start to the moment the step
	// was abandoned.
	Elapsed time.Duration
	// Limit is the budget's length.
	Limit time.Duration
	// Cause is the error the step failed with, such as an I/O timeout; nil
	// if the step was abandoned before it started.
	Cause error
}

// Error says which step (and hop) ran out of time, for example
// "route: connection acquisition deadline 200ms exceeded after 201ms during connect at proxy hop 2".
func (e *DeadlineError) Error() string {
	s := "route: connection acquisition deadline " + e.Limit.String() +
		" exceeded after " + e.Elapsed.String() + " during " + e.Step.String()
	if e.Hop > 0 {
		s += " at proxy hop " + strconv.Itoa(e.Hop)
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *DeadlineError) Unwrap() error { return e.Cause }

// Timeout reports true: the error is a timeout.
func (e *DeadlineError) Timeout() bool { return true }

// Temporary reports false. It exists so that *DeadlineError satisfies
// net.Error.
func (e *DeadlineError) Temporary() bool { return false }
