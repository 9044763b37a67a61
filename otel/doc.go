// Package otel records what a replaysafe.Transport does as OpenTelemetry
// spans and metrics: every wire attempt, the rule that ended it, the
// automatic resends and configured retries, the retry budget's refusals,
// and the connections dialed, reused and closed.
//
// It is a module of its own (github.com/replaysafe/replaysafe/otel), so
// the library's module graph never contains OpenTelemetry. It reads only
// the root package's public replaysafe.Observer: New makes an
// Instrumentation and its Observer method returns the hooks to put in
// replaysafe.Options.Observer (chaining hooks already there).
//
// # Spans
//
// Each call gets a span named "replaysafe {method}" (kind internal), a
// child of the span in the request's context (an otelhttp span around
// the Transport, or any other), and one child span per wire attempt
// named "{method}" (kind client), as the OpenTelemetry HTTP client
// semantic conventions ask for a request that is sent more than once.
// Attempt spans are recorded when the attempt is over (the Transport
// reports it then), with the attempt's real start time when the
// Observer's OnAttemptStart reported it; they are not propagated in the
// request's headers. Each copy of a hedged call (replaysafe.Retry.Hedge)
// is an attempt span of its own, the copies in flight at once; the call
// span ends once the call delivered or failed and every copy that
// started was reported, a copy that lost to another's response
// included, so it ends after all of them.
//
// Attributes, on the call span and on every attempt span unless said:
//
//   - http.request.method: the request's method.
//   - url.full: the request's URL, its user information redacted.
//   - server.address, server.port: the URL's host and port.
//   - network.protocol.version (attempt): "1.1", "2" or "3", the
//     protocol of the connection the attempt ran on, when it got one.
//   - http.response.status_code: on an attempt, the status it received
//     (a retried 503 too); on the call span, the delivered response's.
//   - error.type: on an attempt that failed, the slug of the fsm rule
//     that failed it (such as "ambiguous-idempotent-resend"); on a call
//     that failed, the slug of the rule in its *replaysafe.Error; on a
//     status of 400 or more, the status code.
//   - http.request.resend_count (attempt): on every attempt after the
//     first, its ordinal: 1 for the second attempt, whatever its cause.
//   - replaysafe.attempt (attempt): "original", "resend" (the automatic
//     resend), "retry" (a configured retry, or a retry after 425) or
//     "hedge" (a copy sent while another copy of the call was in flight,
//     made by RS29).
//   - replaysafe.rule (attempt): the ID of the call rule that decided
//     how the call went on after the attempt (RS02 delivered, RS20
//     resent, RS23 retried, RS18 failed, RS27 the budget refused, ...).
//     On the call span: the rule that ended the call.
//   - replaysafe.resend_rule (attempt): on every attempt after the
//     first, the ID of the rule that made it: the replaysafe.rule of the
//     attempt that was resent or retried, or RS29 for a hedge.
//   - replaysafe.connection.reused (attempt): whether the attempt ran
//     on a pooled connection.
//   - replaysafe.attempts (call): the number of wire attempts.
//
// Events: "replaysafe.retry_wait" on the call span when a configured
// retry waits, with replaysafe.retry.delay (seconds) and replaysafe.rule;
// "replaysafe.trace" on every attempt that did not simply deliver, with
// replaysafe.trace, the attempt in the spec trace format that
// `replaysafe explain` replays to its decision.
//
// # Metrics
//
// Meter "github.com/replaysafe/replaysafe/otel":
//
//   - http.client.request.duration (histogram, s): each wire attempt,
//     from its start to its end (the response body's end when it
//     delivered), with http.request.method, server.address,
//     server.port, network.protocol.version, http.response.status_code
//     or error.type, and replaysafe.attempt.
//   - replaysafe.client.attempts (counter, {attempt}): wire attempts,
//     with replaysafe.attempt, replaysafe.rule, replaysafe.outcome
//     ("deliver", "fail", "resend", "retry", or "continue" for a copy of
//     a hedged call that failed beside another or lost to another's
//     response, RS31: how the call went on), http.request.method,
//     server.address, network.protocol.version.
//   - replaysafe.client.resends (counter, {resend}): automatic resends,
//     with replaysafe.rule, http.request.method, server.address,
//     network.protocol.version (of the attempt resent).
//   - replaysafe.client.retries (counter, {retry}): configured retries,
//     with the same attributes. Neither counts hedges.
//   - replaysafe.client.hedges (counter, {hedge}): hedges sent, with
//     http.request.method and server.address.
//   - replaysafe.client.retry.delay (histogram, s): the wait before each
//     configured retry, with replaysafe.rule and server.address.
//   - replaysafe.client.failures (counter, {call}): calls that failed,
//     with replaysafe.rule (of the *replaysafe.Error, or "none"),
//     error.type, http.request.method, server.address.
//   - replaysafe.client.retry_budget.refusals (counter, {retry}): retries
//     the route's retry budget refused (RS27), with server.address.
//
// Connections, from the Observer's OnConn; every series has
// server.address, server.port and network.protocol.version:
//
//   - replaysafe.client.connection.dials (counter, {connection}):
//     connections dialed (ready for their first request).
//   - replaysafe.client.connection.reuses (counter, {connection}):
//     attempts that took a pooled connection.
//   - replaysafe.client.connection.closes (counter, {connection}):
//     connections closed, with replaysafe.connection.close_reason, a
//     replaysafe.ConnCloseReason's name: "idle", "discarded", "goaway",
//     "broken" or "taken-over".
//   - replaysafe.client.connections.open (observable gauge,
//     {connection}): the connections open now (dialed and not yet
//     closed), per route and protocol; a route keeps its series at 0
//     once its connections closed.
//   - replaysafe.client.connections.idle (observable gauge,
//     {connection}): the idle pooled connections of the Transports
//     given to Instrumentation.ObserveTransport, all routes together
//     (the Transport counts them per pool, not per route).
//
// The conventions' http.client.open_connections is not used: it needs
// http.connection.state (active or idle) per route, which the
// Observer's events do not tell.
//
// Names and units follow the OpenTelemetry semantic conventions where
// one exists (semconv 1.43.0), and use the replaysafe namespace where
// none does.
package otel
