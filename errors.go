package replaysafe

import (
	"fmt"
	"strings"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/driver"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// Error is the error a call returns when replaysafe gives up on it: the
// rule that decided, how many wire attempts were made, and the cause.
// http.Client.Do returns it wrapped in a *url.Error, where errors.As
// finds it, except when http.Client.Timeout has passed: net/http may
// then replace it with an error that keeps only its text. Bound calls
// with the request's context instead, or take the *Error from
// Observer.OnError.
type Error struct {
	// Rule is the rule that decided the final failure, such as
	// fsm.RuleAmbiguousNotIdempotent (RS18), or the call rule that stopped
	// a configured retry (RS26 when the attempts were used up, RS27 when
	// the route's retry budget was).
	Rule fsm.Rule
	// Attempts is the number of wire attempts the call made: 1, 2 when
	// the failure hit the automatic resend, up to Retry.MaxAttempts with
	// configured retries.
	Attempts int
	// History is the call machine's decision after each attempt, in
	// order: why the call went on (the rule of each resend or retry, and
	// the wait before it) and, last, the decision that ended it. A hedged
	// call also lists each hedge decision (resend by hedge, or continue by
	// hedge-refused) and each copy that failed beside another (continue
	// by hedge-copy-failed), in the order they were decided.
	History []fsm.CallDecision
	// Err is the cause: the stack's error, classified into the event the
	// rule decided on.
	Err error
}

// maxCauseText bounds the bytes of the cause's message that Error quotes:
// parts of it come from the server (a reason phrase, an HTTP/2 GOAWAY's
// debug data, up to a frame's size, that x/net quotes whole).
const maxCauseText = 1 << 10

// Error names the cause, the rule by ID and slug, and the attempt count.
// It quotes at most 1 KiB of the cause's message, saying how many bytes
// it left out; Unwrap gives the whole cause.
func (e *Error) Error() string {
	s := "s"
	if e.Attempts == 1 {
		s = ""
	}
	// One prefix: a cause of this package's own already names it.
	cause := proxy.CutText(strings.TrimPrefix(fmt.Sprint(e.Err), "replaysafe: "), maxCauseText)
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
// Options' phase limits passed (AcquireTimeout, WriteTimeout,
// ResponseHeaderTimeout), or because the upload of the request body
// stalled (BodyReadTimeout, UploadStallTimeout): its Phase, Limit and
// Stall, and for an acquisition through proxies the Step and hop that
// was running (a *route.DeadlineError, which errors.As finds too).
// errors.Is(err, context.DeadlineExceeded) holds for it. Such a failure
// is never resent (RS06).
type TimeoutError = recorder.TimeoutError

// Stall names the side of a request body upload that stopped making
// progress: StallProducer (the caller's body) or StallTransport (the
// connection); its zero value (recorder.StallNone) means no stall: a
// phase limit passed.
type Stall = recorder.Stall

// Stalls, as TimeoutError.Stall reports them.
const (
	StallProducer  = recorder.StallProducer
	StallTransport = recorder.StallTransport
)

// ProxyError reports that the proxies of a request could not be decided
// (Options.Proxy, ProxyChain or ProxyAuth failed or returned something
// unusable), with the 1-based Hop it concerns (0 for the selector) and
// the cause. It is returned before any wire attempt. A failure of an
// established proxy hop is a *proxy.ConnectError, *proxy.StepError or
// *proxy.ParseError (package transports/proxy) inside an *Error.
type ProxyError = proxy.ResolveError

// callError returns the error RoundTrip reports for err, what a started
// call ended with: the *Error of a failure a rule decided, else err.
func callError(err error) error {
	if f, ok := err.(*driver.Failure); ok {
		return &Error{Rule: f.Rule, Attempts: f.Attempts, History: f.History, Err: f.Err}
	}
	return err
}
