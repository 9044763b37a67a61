package replaysafe

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// Error is the error a call returns when replaysafe gives up on it: the
// rule that decided, how many wire attempts were made, and the cause.
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
	// the wait before it) and, last, the decision that ended it.
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

// The errors below come from the layers under the Transport; a call's
// *Error wraps them, and errors.As finds them by these names, all in
// this package.

// ProxyConnectError reports a CONNECT that did not open a tunnel: a
// status outside 2xx from proxy Hop (1-based) at Proxy for Target, with
// StatusCode, Status (the reason phrase), the ProxyAuthenticate
// challenges of a 407 and the whole Header. Its message quotes at most
// 256 bytes of each text from the proxy and says how much it cut; the
// fields keep the whole values. It is decided as an acquisition failure
// (RS04): nothing of the request was sent.
type ProxyConnectError = proxy.ConnectError

// ProxyParseError reports a malformed CONNECT reply: the Offset of the
// offending line and the Reason; Err is ErrProxyHeaderTooLarge when the
// header section did not end within 64 KiB.
type ProxyParseError = proxy.ParseError

// ErrProxyHeaderTooLarge is wrapped by a ProxyParseError for a CONNECT
// reply whose header section does not end within 64 KiB.
var ErrProxyHeaderTooLarge = proxy.ErrHeaderTooLarge

// ProxyStepError reports a failed step of connection acquisition that is
// not a deadline (a deadline is an *AcquireDeadlineError): the Step
// (dns, tcp, tls-to-proxy, connect, socks, tls-to-origin), the Hop
// (1-based; 0 for a step with the origin), the Addr it dealt with and the
// cause Err.
type ProxyStepError = proxy.StepError

// ChainCredentialsError reports a proxy chain that would show hop Hop's
// credentials (Addr, of Kind http or socks5: cleartext inside the tunnel)
// to the hops before it. A call is refused with it, as the cause of a
// *ProxyError, before anything is dialed, unless
// Options.AllowCleartextChainCredentials.
type ChainCredentialsError = proxy.ChainCredentialsError

// ErrCleartextChainCredentials is wrapped by every ChainCredentialsError.
var ErrCleartextChainCredentials = proxy.ErrCleartextChainCredentials

// EarlyResponseError reports a proxy (Hop, Addr) that sent Bytes after
// its CONNECT 2xx, before the request to a plain-http origin was written:
// they cannot be the response. The attempt fails as an acquisition
// failure (RS04).
type EarlyResponseError = proxy.EarlyResponseError

// InformationalLimitError reports an attempt whose informational (1xx)
// responses went over their bound: Count of them, Bytes of header fields
// in total, against Limit, the last with Status (see
// Options.MaxResponseHeaderBytes). The attempt fails by RS07, never
// resent.
type InformationalLimitError = informational.LimitError

// ErrInformationalLimit is wrapped by every InformationalLimitError.
var ErrInformationalLimit = informational.ErrLimit
