package fsm

import (
	"strconv"
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

// enumString prints names[v], or Type(v) for a value outside the enum.
func enumString(typ string, names []string, v uint8) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(int(v)) + ")"
}

// enumParse finds s in names; the zero index is never a valid parse result.
func enumParse(names []string, s string) (uint8, bool) {
	if v, ok := enumParseAll(names, s); ok && v != 0 {
		return v, true
	}
	return 0, false
}

// enumParseAll finds s in names, the zero value included.
func enumParseAll(names []string, s string) (uint8, bool) {
	for i, n := range names {
		if n == s {
			return uint8(i), true
		}
	}
	return 0, false
}

// Method is the request method, reduced to what the rules need.
type Method uint8

// Methods. RFC 9110 §9.2.2 makes GET, HEAD, OPTIONS, TRACE, PUT and DELETE
// idempotent; every other method is treated as not idempotent.
const (
	MethodUnknown Method = iota // zero value: not set; treated as not idempotent
	MethodGET                   // GET
	MethodHEAD                  // HEAD
	MethodOPTIONS               // OPTIONS
	MethodTRACE                 // TRACE
	MethodPUT                   // PUT
	MethodDELETE                // DELETE
	MethodPOST                  // POST
	MethodPATCH                 // PATCH
	MethodCONNECT               // CONNECT
	MethodOther                 // any other token
)

var methodNames = []string{"unknown", "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", "POST", "PATCH", "CONNECT", "other"}

// String returns the value's name, or Method(n) for a value outside the enum.
func (m Method) String() string { return enumString("Method", methodNames, uint8(m)) }

// ParseMethod maps an HTTP method token to a Method. Methods are case
// sensitive (RFC 9110 §9.1); an unrecognised token is MethodOther and the
// empty string is MethodGET, as in net/http.
func ParseMethod(s string) Method {
	if s == "" {
		return MethodGET
	}
	if v, ok := enumParse(methodNames[:MethodOther], s); ok {
		return Method(v)
	}
	return MethodOther
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
	BodyNone             BodyKind = iota // zero value: no body (nil or http.NoBody)
	BodyBuffered                         // a body that can be produced again (GetBody)
	BodyOneShotUntouched                 // a one-shot reader nobody has read yet
	BodyOneShotConsumed                  // a one-shot reader that has been read
)

var bodyNames = []string{"none", "buffered", "oneshot", "consumed"}

// String returns the value's name, or BodyKind(n) for a value outside the enum.
func (b BodyKind) String() string { return enumString("BodyKind", bodyNames, uint8(b)) }

// ParseBodyKind is the inverse of BodyKind.String.
func ParseBodyKind(s string) (BodyKind, bool) {
	v, ok := enumParseAll(bodyNames, s)
	return BodyKind(v), ok
}

// Reproducible reports whether the body can be sent again after it was read.
func (b BodyKind) Reproducible() bool { return b == BodyNone || b == BodyBuffered }

// Attempt says whether this wire attempt is the call's first or its one
// automatic resend.
type Attempt uint8

// Attempts.
const (
	AttemptOriginal Attempt = iota // zero value: the first wire attempt of a call
	AttemptResend                  // the automatic resend; it is never resent
)

var attemptNames = []string{"original", "resend"}

// String returns the value's name, or Attempt(n) for a value outside the enum.
func (a Attempt) String() string { return enumString("Attempt", attemptNames, uint8(a)) }

// ParseAttempt is the inverse of Attempt.String.
func ParseAttempt(s string) (Attempt, bool) {
	v, ok := enumParseAll(attemptNames, s)
	return Attempt(v), ok
}

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
	ProtoUnknown Proto = iota // zero value: not reported
	ProtoH1                   // HTTP/1.1
	ProtoH2                   // HTTP/2
	ProtoH3                   // HTTP/3
)

var protoNames = []string{"unknown", "h1", "h2", "h3"}

// String returns the value's name, or Proto(n) for a value outside the enum.
func (p Proto) String() string { return enumString("Proto", protoNames, uint8(p)) }

// ParseProto is the inverse of Proto.String.
func ParseProto(s string) (Proto, bool) {
	v, ok := enumParse(protoNames, s)
	return Proto(v), ok
}

// Phase names the part of an attempt a timeout belongs to.
type Phase uint8

// Phases.
const (
	PhaseNone    Phase = iota // zero value: no phase
	PhaseAcquire              // getting a connection
	PhaseWrite                // writing the request
	PhaseHeader               // waiting for the final response header section
	PhaseBody                 // reading the response body
)

var phaseNames = []string{"none", "acquire", "write", "header", "body"}

// String returns the value's name, or Phase(n) for a value outside the enum.
func (p Phase) String() string { return enumString("Phase", phaseNames, uint8(p)) }

// ParsePhase is the inverse of Phase.String.
func ParsePhase(s string) (Phase, bool) {
	v, ok := enumParse(phaseNames, s)
	return Phase(v), ok
}

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
	ActionContinue Action = iota // zero value: keep going, feed the next event
	ActionDeliver                // hand the final response to the caller
	ActionFail                   // return an error to the caller
	ActionResend                 // send the request once more on a new connection
)

var actionNames = []string{"continue", "deliver", "fail", "resend"}

// String returns the value's name, or Action(n) for a value outside the enum.
func (a Action) String() string { return enumString("Action", actionNames, uint8(a)) }

// ParseAction is the inverse of Action.String.
func ParseAction(s string) (Action, bool) {
	v, ok := enumParseAll(actionNames, s)
	return Action(v), ok
}

// Final reports whether the action ends the attempt's decision.
func (a Action) Final() bool { return a != ActionContinue }

// ConnVerdict says what to do with the connection the attempt ran on.
type ConnVerdict uint8

// Connection verdicts.
const (
	ConnInUse   ConnVerdict = iota // zero value: the exchange is still running
	ConnReuse                      // a clean, complete exchange: return it to the pool
	ConnDiscard                    // anything else: close it
)

var connNames = []string{"in-use", "reuse", "discard"}

// String returns the value's name, or ConnVerdict(n) for a value outside the enum.
func (c ConnVerdict) String() string { return enumString("ConnVerdict", connNames, uint8(c)) }

// ParseConnVerdict is the inverse of ConnVerdict.String.
func ParseConnVerdict(s string) (ConnVerdict, bool) {
	v, ok := enumParseAll(connNames, s)
	return ConnVerdict(v), ok
}

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
