// Package ruledata is the normative list of replaysafe's dispatch rules: one
// entry a rule, in the order the machine checks them. It imports nothing so
// that the generator can write the fsm rule constants from it.
//
// Changing a rule here and running go generate ./... rewrites
// fsm/rule_gen.go, docs/rules.md and docs/diagram.md.
package ruledata

// Rule is one dispatch rule.
type Rule struct {
	// Number is the rule's stable numeric value in fsm. Never reuse one. A
	// new rule takes the next free number wherever its place in the
	// precedence order is; numbers are dense from 0.
	Number int
	// ID is the stable short identifier quoted in code, tests and logs.
	ID string
	// Name is the Go identifier suffix: fsm.Rule<Name>.
	Name string
	// Slug is the rule's name in traces and in Rule.String.
	Slug string
	// Action is what the rule decides: continue, deliver, fail or resend.
	Action string
	// Statement says the rule in plain words.
	Statement string
	// Source cites where the rule comes from.
	Source string
	// Call marks a rule of the call machine (fsm.Call), which decides
	// between wire attempts; the others decide within one attempt
	// (fsm.Machine). Each machine applies its own rules in list order.
	Call bool
}

// Rules lists every rule. When several could decide a failure, the first
// in this list that applies decides (the precedence order). The order is
// not the order of Number: a rule added later is placed where it decides.
var Rules = []Rule{
	{
		Number: 0, ID: "RS00", Name: "None", Slug: "none", Action: "continue",
		Statement: "No rule has decided yet; the zero value of fsm.Rule.",
		Source:    "replaysafe",
	},
	{
		Number: 1, ID: "RS01", Name: "Progress", Slug: "progress", Action: "continue",
		Statement: "An event that is allowed in the current state and decides nothing is recorded, and the caller feeds the next one.",
		Source:    "replaysafe",
	},
	{
		Number: 2, ID: "RS02", Name: "DeliverFinalResponse", Slug: "deliver-final-response", Action: "deliver",
		Statement: "The final response's header section arrived: hand the response to the caller. The connection is returned to the pool only when the response completes cleanly; any failure, timeout or out-of-order event after delivery discards it.",
		Source:    "RFC 9110 §15; RFC 9112 §9.3",
	},
	{
		Number: 3, ID: "RS03", Name: "InvalidOrder", Slug: "invalid-order", Action: "fail",
		Statement: "An event that cannot happen in the current state (a connection acquired twice, a byte written before a connection, a request handed back after bytes were written, a protocol-specific event on another protocol) fails the attempt and discards the connection; a broken adapter never earns a resend.",
		Source:    "replaysafe",
	},
	{
		Number: 4, ID: "RS04", Name: "AcquireFailed", Slug: "acquire-failed", Action: "fail",
		Statement: "No connection could be established. Nothing was sent, but a new dial is a retry policy's business, not a replay: the error goes to the caller.",
		Source:    "replaysafe; request-dispatch-guarantees (acquisition)",
	},
	{
		Number: 5, ID: "RS05", Name: "Canceled", Slug: "canceled", Action: "fail",
		Statement: "The caller canceled the request: never resent.",
		Source:    "resend-idempotent-on-reused-connection",
	},
	{
		Number: 6, ID: "RS06", Name: "Timeout", Slug: "timeout", Action: "fail",
		Statement: "A phase ran out of time (a timeout event, or a tick at or past the deadline the machine reported): never resent, because a slow server may still be processing the request.",
		Source:    "resend-idempotent-on-reused-connection",
	},
	{
		Number: 21, ID: "RS21", Name: "LocalFailure", Slug: "local-failure", Action: "fail",
		Statement: "The caller's side failed, not the server or the network: the request body's Read returned an error, or GetBody could not produce the body again for a resend. The request cannot be sent as the caller meant it, so it is never resent, whatever the wire showed; the error is the caller's and keeps its cause.",
		Source:    "replaysafe; request-dispatch-guarantees (replay safety)",
	},
	{
		Number: 7, ID: "RS07", Name: "ResponseStarted", Slug: "response-started", Action: "fail",
		Statement: "At least one response byte arrived (a status line, a partial line, a 1xx, a malformed response): the server saw the request, so it is never resent. This comes before every evidence rule: after a 1xx the server has processed the header section, so a REFUSED_STREAM, a GOAWAY boundary or an H3_REQUEST_REJECTED that follows it is not a resend permission.",
		Source:    "resend-idempotent-on-reused-connection; RFC 9110 §9.2.2",
	},
	{
		Number: 8, ID: "RS08", Name: "NoSecondResend", Slug: "no-second-resend", Action: "fail",
		Statement: "The failed attempt was the last the call may make: the automatic resend, or the last attempt a configured retry policy allows. It is not resent again, so without a policy a call goes on the wire at most twice.",
		Source:    "RFC 9110 §9.2.2 (\"A client SHOULD NOT automatically retry a failed automatic retry.\")",
	},
	{
		Number: 9, ID: "RS09", Name: "ResendOff", Slug: "resend-off", Action: "fail",
		Statement: "Automatic resending is switched off for this request.",
		Source:    "replaysafe",
	},
	{
		Number: 10, ID: "RS10", Name: "RetryPolicy", Slug: "retry-policy", Action: "fail",
		Statement: "The user configured a retry policy of their own; it keeps its own semantics and replaysafe never resends underneath it.",
		Source:    "resend-idempotent-on-reused-connection",
	},
	{
		Number: 11, ID: "RS11", Name: "EvidenceBodyConsumed", Slug: "evidence-body-consumed", Action: "fail",
		Statement: "The server provably did not process the request, but its one-shot body was read and cannot be produced again; it is never replaced by an empty body.",
		Source:    "request-dispatch-guarantees (replay safety, one-shot bodies)",
	},
	{
		Number: 12, ID: "RS12", Name: "EvidenceHandedBack", Slug: "evidence-handed-back", Action: "resend",
		Statement: "The stack handed the request back before serialising any of it: resend once on a new connection, any method, the body as it was.",
		Source:    "request-dispatch-guarantees (one-shot bodies and pooling)",
	},
	{
		Number: 13, ID: "RS13", Name: "EvidenceRefusedStream", Slug: "evidence-refused-stream", Action: "resend",
		Statement: "An HTTP/2 server reset our stream with REFUSED_STREAM, which guarantees no application processing, before any response byte (a 1xx included, RS07): resend once, any method, if the body is reproducible or untouched, on the same connection when it has room (only the stream was refused), else on a new one.",
		Source:    "RFC 9113 §8.7",
	},
	{
		Number: 14, ID: "RS14", Name: "EvidenceGoAwayBoundary", Slug: "evidence-goaway-boundary", Action: "resend",
		Statement: "A GOAWAY shows our stream was beyond what the server processes (HTTP/2: our stream ID is greater than the last stream ID; HTTP/3: our stream ID is at least the GOAWAY ID, when the adapter saw it), and no response byte arrived (a 1xx included, RS07): resend once on a new connection, any method, if the body is reproducible or untouched.",
		Source:    "RFC 9113 §6.8; RFC 9114 §5.2",
	},
	{
		Number: 15, ID: "RS15", Name: "EvidenceRequestRejected", Slug: "evidence-request-rejected", Action: "resend",
		Statement: "An HTTP/3 server rejected our request with H3_REQUEST_REJECTED, which guarantees no application processing, before any response byte (a 1xx included, RS07): resend once, any method, if the body is reproducible or untouched, on a connection other than the rejecting one (a pooled one when the rejection came alone, with no GOAWAY and the connection open; else a new one).",
		Source:    "RFC 9114 §4.1.1 and §8.1",
	},
	{
		Number: 16, ID: "RS16", Name: "EvidenceNothingWritten", Slug: "evidence-nothing-written", Action: "resend",
		Statement: "The connection failed before a single request byte reached the socket: resend once on a new connection, any method, if the body is reproducible or untouched.",
		Source:    "replaysafe; RFC 9110 §9.2.2",
	},
	{
		Number: 17, ID: "RS17", Name: "AmbiguousFreshConn", Slug: "ambiguous-fresh-conn", Action: "fail",
		Statement: "A fresh connection failed after request bytes were written and without evidence of non-processing: a real error, not a stale connection.",
		Source:    "resend-idempotent-on-reused-connection",
	},
	{
		Number: 18, ID: "RS18", Name: "AmbiguousNotIdempotent", Slug: "ambiguous-not-idempotent", Action: "fail",
		Statement: "A reused connection failed ambiguously under a method that is not idempotent and carries no Idempotency-Key or X-Idempotency-Key: the server may have processed it, so it is never duplicated.",
		Source:    "RFC 9110 §9.2.2; resend-idempotent-on-reused-connection",
	},
	{
		Number: 19, ID: "RS19", Name: "AmbiguousBodyNotReproducible", Slug: "ambiguous-body-not-reproducible", Action: "fail",
		Statement: "A reused connection failed ambiguously, the request is idempotent, but its body is one-shot: an ambiguous failure needs a body that can be produced again (none or buffered).",
		Source:    "resend-idempotent-on-reused-connection; request-dispatch-guarantees",
	},
	{
		Number: 20, ID: "RS20", Name: "AmbiguousIdempotentResend", Slug: "ambiguous-idempotent-resend", Action: "resend",
		Statement: "A reused connection failed ambiguously (closed, reset, TLS failure, GOAWAY at or above our stream) before any response byte, the request is idempotent by method or key, and its body is reproducible: resend once on a new connection.",
		Source:    "RFC 9110 §9.2.2; resend-idempotent-on-reused-connection",
	},
	{
		Number: 22, ID: "RS22", Name: "TooEarly", Slug: "too-early", Action: "resend", Call: true,
		Statement: "The server answered 425 Too Early: it did not process a request it would not risk having replayed. Retry once, any method, if the body is reproducible, on a connection whose handshake is complete, never as early data; a second 425 is delivered. It counts as one of the call's attempts and needs no configured policy.",
		Source:    "RFC 8470 §5.2",
	},
	{
		Number: 28, ID: "RS28", Name: "RetryAfterTooLong", Slug: "retry-after-too-long", Action: "deliver", Call: true,
		Statement: "A 429 or 503 asked, in Retry-After, for a longer wait than the policy's MaxRetryAfter: the response is delivered rather than holding the call.",
		Source:    "RFC 9110 §10.2.3; replaysafe",
	},
	{
		Number: 32, ID: "RS32", Name: "EarlyDataUnsafe", Slug: "early-data-unsafe", Action: "fail",
		Statement: "A request goes as early data (0-RTT, before the handshake completes) only when a copy an attacker replays can do no harm and a rejection can be resent: it is the call's original attempt, resending is on, no retry policy of the caller's own is set, and it has a safe method (GET, HEAD, OPTIONS, TRACE) and no body, or, when the caller's documented option allows keyed early data, an Idempotency-Key and a reproducible body. A connection acquired in its handshake for any other request fails the attempt before a byte is written, and is discarded.",
		Source:    "RFC 8470 §2 and §4; RFC 9110 §9.2.1",
	},
	{
		Number: 33, ID: "RS33", Name: "EarlyDataRejected", Slug: "early-data-rejected", Action: "resend",
		Statement: "The server rejected the early data the request went in (the stack's own signal, such as quic-go's Err0RTTRejected, never error text): none of it was processed, so the request is sent again at once, after the handshake completes and never as early data, and that copy is the call's automatic resend, which RS08 keeps from being resent. A rejection before a request byte was written is RS16's; a 425 after early data that was accepted is RS22's.",
		Source:    "RFC 8470 §2; replaysafe",
	},
	{
		Number: 26, ID: "RS26", Name: "RetryExhausted", Slug: "retry-exhausted", Action: "fail", Call: true,
		Statement: "A configured retry would be allowed, but the call has made the policy's attempts (the automatic resend counted): the last failure is returned, or the last response delivered.",
		Source:    "replaysafe; RFC 9110 §9.2.2",
	},
	{
		Number: 27, ID: "RS27", Name: "RetryBudget", Slug: "retry-budget", Action: "fail", Call: true,
		Statement: "A configured retry would be allowed, but the route's retry budget is spent (retries are at most a ratio of the route's recent calls plus a floor per second): the last failure is returned, or the last response delivered, so a failing upstream does not get multiplied load.",
		Source:    "replaysafe (retry budgets as in Finagle, Envoy and gRPC)",
	},
	{
		Number: 23, ID: "RS23", Name: "RetryStatus", Slug: "retry-status", Action: "resend", Call: true,
		Statement: "A configured policy lists the delivered response's status, the request is idempotent by method or key, and its body is reproducible: retry after the jittered backoff, or after the response's Retry-After when a 429 or 503 asks for longer. The response is closed unread.",
		Source:    "RFC 9110 §9.2.2, §10.2.3, §15.5.20, §15.6.3–5; RFC 6585 §4",
	},
	{
		Number: 24, ID: "RS24", Name: "RetryAcquire", Slug: "retry-acquire", Action: "resend", Call: true,
		Statement: "A configured policy is set and no connection could be established (RS04): nothing was sent, so any method is retried after the jittered backoff, if its body is still as it was (none, buffered, or a one-shot reader no attempt has read).",
		Source:    "replaysafe; request-dispatch-guarantees (acquisition)",
	},
	{
		Number: 25, ID: "RS25", Name: "RetryAmbiguous", Slug: "retry-ambiguous", Action: "resend", Call: true,
		Statement: "A configured policy is set and an attempt failed without evidence either way (a timeout, a response cut after it started, a fresh connection failing, or the last automatic resend failing): retried after the jittered backoff only where a copy has no further side effect, a method idempotent or keyed, and a reproducible body. A POST without a key, a one-shot body and every refusal of the attempt rules (canceled, local failure, resend off, a retry policy of the caller's own, RS18, RS19) stay final.",
		Source:    "RFC 9110 §9.2.2; resend-idempotent-on-reused-connection",
	}, {
		Number: 29, ID: "RS29", Name: "Hedge", Slug: "hedge", Action: "resend", Call: true,
		Statement: "A hedging policy is set and the hedge delay passed with no response header on any copy in flight: one more copy goes out at once on a connection no copy of the call uses, if a copy has no further side effect (an idempotent method, or a key when the policy allows keyed hedges; a reproducible body; resending on and no retry policy of the caller's own), the policy's hedges and attempts leave one, and the route's retry budget has room. The first response header wins; the other copies are canceled and their bodies closed.",
		Source:    "RFC 9110 §9.2.2; replaysafe (hedged requests as in \"The Tail at Scale\", Dean and Barroso)",
	},
	{
		Number: 30, ID: "RS30", Name: "HedgeRefused", Slug: "hedge-refused", Action: "continue", Call: true,
		Statement: "The hedge delay passed, but no copy may go: no hedges are configured or all were sent, the request's copies could have a side effect (a method neither idempotent nor keyed, a key without keyed hedges allowed, a one-shot body, resending off, a retry policy of the caller's own), the copy would pass the policy's attempts, or the route's retry budget is spent. The copies in flight go on alone.",
		Source:    "RFC 9110 §9.2.2; replaysafe",
	},
	{
		Number: 31, ID: "RS31", Name: "HedgeCopyFailed", Slug: "hedge-copy-failed", Action: "continue", Call: true,
		Statement: "One copy of a hedged call ended without a response while another copy is in flight: its failure is not the call's and earns no resend; the call waits for the other copies. It counts as one of the call's attempts. When the last copy in flight fails, the call rules decide on it as on any later attempt. A copy canceled because another copy's response header came first is counted the same way, and never decided on.",
		Source:    "replaysafe",
	},
}
