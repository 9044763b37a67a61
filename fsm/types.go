package fsm

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -linecomment -type EventKind,Method,BodyKind,Attempt,Proto,Phase,Action,ConnVerdict -output enum_string.go

import (
	"strings"
	"time"
)

// Instant is a point on the caller's monotonic clock, in nanoseconds. The
// machine never reads a clock; every instant it knows arrived on an event.
type Instant int64

// Add returns the instant d after i.
func (i Instant) Add(d time.Duration) Instant { return i + Instant(d) }

// String prints the instant as a duration since the clock's origin.
func (i Instant) String() string { return time.Duration(i).String() }

// ParseEnum is the inverse of an enum's String: it finds the value below
// n whose String is s. The zero value is a valid result only when zero is
// set (an enum whose zero means "not set" does not parse it). Every Parse
// function of fsm and its sub-packages is one call of it.
func ParseEnum[T interface {
	~uint8
	String() string
}](s string, n T, zero bool) (T, bool) {
	for v := T(0); v < n; v++ {
		if (zero || v != 0) && v.String() == s {
			return v, true
		}
	}
	return 0, false
}

// Method is the request method, reduced to what the rules need.
type Method uint8

// Methods. RFC 9110 §9.2.2 makes GET, HEAD, OPTIONS, TRACE, PUT and DELETE
// idempotent; every other method is treated as not idempotent.
// The line comment after each constant is its String (stringer -linecomment).
const (
	// MethodUnknown is the zero value: not set; treated as not idempotent.
	MethodUnknown Method = iota // unknown
	// MethodGET is GET.
	MethodGET // GET
	// MethodHEAD is HEAD.
	MethodHEAD // HEAD
	// MethodOPTIONS is OPTIONS.
	MethodOPTIONS // OPTIONS
	// MethodTRACE is TRACE.
	MethodTRACE // TRACE
	// MethodPUT is PUT.
	MethodPUT // PUT
	// MethodDELETE is DELETE.
	MethodDELETE // DELETE
	// MethodPOST is POST.
	MethodPOST // POST
	// MethodPATCH is PATCH.
	MethodPATCH // PATCH
	// MethodCONNECT is CONNECT.
	MethodCONNECT // CONNECT
	// MethodOther is any other token.
	MethodOther // other
)

// ParseMethod maps an HTTP method token to a Method. Methods are case
// sensitive (RFC 9110 §9.1); an unrecognised token is MethodOther and the
// empty string is MethodGET, as in net/http.
func ParseMethod(s string) Method {
	if s == "" {
		return MethodGET
	}
	if v, ok := ParseEnum(s, MethodOther, false); ok {
		return v
	}
	return MethodOther
}

// Safe reports whether RFC 9110 §9.2.1 defines the method as safe (GET,
// HEAD, OPTIONS, TRACE): a copy asks for nothing beyond the first.
func (m Method) Safe() bool {
	switch m {
	case MethodGET, MethodHEAD, MethodOPTIONS, MethodTRACE:
		return true
	}
	return false
}

// Idempotent reports whether RFC 9110 §9.2.2 defines the method as idempotent.
func (m Method) Idempotent() bool {
	switch m {
	case MethodGET, MethodHEAD, MethodOPTIONS, MethodTRACE, MethodPUT, MethodDELETE:
		return true
	}
	return false
}

// BodyKind says whether the request body can be sent again.
type BodyKind uint8

// Body kinds.
const (
	// BodyNone is the zero value: no body (nil or http.NoBody).
	BodyNone BodyKind = iota // none
	// BodyBuffered is a body that can be produced again (GetBody).
	BodyBuffered // buffered
	// BodyOneShotUntouched is a one-shot reader nobody has read yet.
	BodyOneShotUntouched // oneshot
	// BodyOneShotConsumed is a one-shot reader that has been read.
	BodyOneShotConsumed // consumed
)

const bodyKindCount = BodyOneShotConsumed + 1

// ParseBodyKind is the inverse of BodyKind.String.
func ParseBodyKind(s string) (BodyKind, bool) { return ParseEnum(s, bodyKindCount, true) }

// Reproducible reports whether the body can be sent again after it was read.
func (b BodyKind) Reproducible() bool { return b == BodyNone || b == BodyBuffered }

// Attempt says whether this wire attempt is an original or its try's one
// automatic resend.
type Attempt uint8

// Attempts.
const (
	// AttemptOriginal is the zero value: a try's first wire attempt, the
	// call's first or a configured retry (Call.Next marks the last one a
	// policy allows AttemptResend instead).
	AttemptOriginal Attempt = iota // original
	// AttemptResend is the automatic resend; it is never resent.
	AttemptResend // resend
)

const attemptCount = AttemptResend + 1

// ParseAttempt is the inverse of Attempt.String.
func ParseAttempt(s string) (Attempt, bool) { return ParseEnum(s, attemptCount, true) }

// Request holds the facts about a request that the rules read. They are
// fixed for the whole attempt; what happens on the wire arrives as events.
type Request struct {
	Method Method
	// IdempotencyKey is set when the request carries an Idempotency-Key or
	// X-Idempotency-Key header field.
	IdempotencyKey bool
	Body           BodyKind
	// RetryPolicy is set when the user configured a retry policy of their
	// own; replaysafe then never resends on its own.
	RetryPolicy bool
	Attempt     Attempt
	// ResendOff is set when automatic resending is switched off.
	ResendOff bool
	// EarlyKeyed is set when the caller lets a request that carries an
	// idempotency key go as early data (RS32); without it only a safe
	// method without a body does.
	EarlyKeyed bool
}

// EarlySafe reports whether the attempt may go as early data (0-RTT),
// before the handshake completes (RS32, RFC 8470 §2 and §4): an attacker
// who replays it can do no harm, and a rejection of it can be resent. It
// is an original attempt, resending is on and no retry policy of the
// caller's own is set; and it has a safe method and no body, or it
// carries an idempotency key, its body is reproducible and EarlyKeyed is
// set. A configured retry's attempt is an original too, and RFC 8470
// §5.2 forbids sending it early: the caller asks EarlySafe of the call's
// first wire attempt only.
func (r Request) EarlySafe() bool {
	if r.Attempt != AttemptOriginal || r.ResendOff || r.RetryPolicy {
		return false
	}
	return r.Method.Safe() && r.Body == BodyNone ||
		r.EarlyKeyed && r.IdempotencyKey && r.Body.Reproducible()
}

// Resend returns the facts of the automatic resend of r: the same facts
// with Attempt set to AttemptResend. The body kind carries over unchanged:
// the machine resends a one-shot body only when it was never read, and an
// ambiguous resend needs a body of kind none or buffered.
func (r Request) Resend() Request {
	r.Attempt = AttemptResend
	return r
}

// String prints the request facts in the trace format.
func (r Request) String() string {
	var b strings.Builder
	b.WriteString("request")
	if r.Method != MethodUnknown { // an absent method= reads back as unknown
		b.WriteString(" method=")
		b.WriteString(r.Method.String())
	}
	b.WriteString(" body=")
	b.WriteString(r.Body.String())
	b.WriteString(" key=")
	b.WriteString(onOff(r.IdempotencyKey))
	b.WriteString(" retry-policy=")
	b.WriteString(onOff(r.RetryPolicy))
	b.WriteString(" resend=")
	b.WriteString(onOff(!r.ResendOff))
	b.WriteString(" attempt=")
	b.WriteString(r.Attempt.String())
	if r.EarlyKeyed { // printed only when set, so that older traces read the same
		b.WriteString(" early-keyed=on")
	}
	return b.String()
}

func onOff(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

// Proto is the wire protocol of the connection an attempt runs on.
type Proto uint8

// Protocols.
const (
	// ProtoUnknown is the zero value: not reported.
	ProtoUnknown Proto = iota // unknown
	// ProtoH1 is HTTP/1.1.
	ProtoH1 // h1
	// ProtoH2 is HTTP/2.
	ProtoH2 // h2
	// ProtoH3 is HTTP/3.
	ProtoH3 // h3
)

const protoCount = ProtoH3 + 1

// ParseProto is the inverse of Proto.String; "unknown" does not parse.
func ParseProto(s string) (Proto, bool) { return ParseEnum(s, protoCount, false) }

// Phase names the part of an attempt a timeout belongs to.
type Phase uint8

// Phases.
const (
	// PhaseNone is the zero value: no phase.
	PhaseNone Phase = iota // none
	// PhaseAcquire is getting a connection.
	PhaseAcquire // acquire
	// PhaseWrite is writing the request.
	PhaseWrite // write
	// PhaseHeader is waiting for the final response header section.
	PhaseHeader // header
	// PhaseBody is reading the response body.
	PhaseBody // body
)

const phaseCount = PhaseBody + 1

// ParsePhase is the inverse of Phase.String; "none" does not parse.
func ParsePhase(s string) (Phase, bool) { return ParseEnum(s, phaseCount, false) }

// Limits bounds how long each phase may take. A zero duration means no limit.
// Each limit runs from the event that opens its phase.
type Limits struct {
	Acquire time.Duration // from New until ConnAcquired
	Write   time.Duration // from ConnAcquired until RequestWritten
	Header  time.Duration // from RequestWritten until FinalHeaders
	Body    time.Duration // from FinalHeaders until ResponseComplete
}

// For returns the limit of phase p; zero (no limit) for PhaseNone or a
// value outside the enum.
func (l Limits) For(p Phase) time.Duration {
	switch p {
	case PhaseAcquire:
		return l.Acquire
	case PhaseWrite:
		return l.Write
	case PhaseHeader:
		return l.Header
	case PhaseBody:
		return l.Body
	}
	return 0
}

// Action is what the caller must do next.
type Action uint8

// Actions.
const (
	// ActionContinue is the zero value: keep going, feed the next event.
	ActionContinue Action = iota // continue
	// ActionDeliver hands the final response to the caller.
	ActionDeliver // deliver
	// ActionFail returns an error to the caller.
	ActionFail // fail
	// ActionResend sends the request once more on a new connection.
	ActionResend // resend
)

const actionCount = ActionResend + 1

// ParseAction is the inverse of Action.String.
func ParseAction(s string) (Action, bool) { return ParseEnum(s, actionCount, true) }

// Final reports whether the action ends the attempt's decision.
func (a Action) Final() bool { return a != ActionContinue }

// ConnVerdict says what to do with the connection the attempt ran on.
type ConnVerdict uint8

// Connection verdicts.
const (
	// ConnInUse is the zero value: the exchange is still running.
	ConnInUse ConnVerdict = iota // in-use
	// ConnReuse is a clean, complete exchange: return it to the pool.
	ConnReuse // reuse
	// ConnDiscard is anything else: close it.
	ConnDiscard // discard
)

const connVerdictCount = ConnDiscard + 1

// ParseConnVerdict is the inverse of ConnVerdict.String.
func ParseConnVerdict(s string) (ConnVerdict, bool) { return ParseEnum(s, connVerdictCount, true) }

// Decision is the machine's answer to one event.
type Decision struct {
	Action Action
	// Rule is the rule that produced Action. Once Action is final, Rule
	// never changes.
	Rule Rule
	Conn ConnVerdict
}

// String prints the decision as "action rule conn=verdict".
func (d Decision) String() string {
	return d.Action.String() + " " + d.Rule.String() + " conn=" + d.Conn.String()
}
