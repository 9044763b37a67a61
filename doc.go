// Package replaysafe is an http.RoundTripper whose replay behaviour is
// specified: it decides, and carries out, exactly when a request may be
// sent again after a connection fails under it.
//
// A persistent client can lose a request to a close it could not have
// seen: the server closes a kept-alive connection just as the next request
// goes out. replaysafe resends such a request once, at once, on a new
// connection, only when the rules allow it: with evidence that the
// server did not process it (nothing reached the socket, HTTP/2
// REFUSED_STREAM, a GOAWAY boundary below the request's stream, HTTP/3
// H3_REQUEST_REJECTED), or when the failure is ambiguous but the
// connection was reused, no response byte arrived, the method is
// idempotent (RFC 9110 §9.2.2) or the request carries Idempotency-Key, the
// body can be produced again, and the failure is not a timeout or a
// cancellation. A failure of the caller's own body is never resent, and
// nothing is after a response byte (a 1xx included). A resend is never
// resent.
//
// Use it as a client's transport:
//
//	client := &http.Client{Transport: replaysafe.New(replaysafe.Options{})}
//
// Options chooses the protocols (HTTP/1.1, HTTP/2, HTTP/3), the pool
// bounds, the phase limits and the proxies; every field names its
// default. Every decision names its rule (package fsm, docs/rules.md). A
// call that fails returns an *Error with the rule, the attempt count and
// the cause; Options.Observer sees every wire attempt with its trace,
// which `replaysafe explain` replays. docs/guarantees.md states the
// HTTP/1.1, HTTP/2 and HTTP/3 guarantees with the conformance tables that
// show them, and docs/proxies.md covers routes, proxies and the
// acquisition deadline.
//
// # Forwarding
//
// Package forward is a streaming reverse proxy (an http.Handler) on a
// Transport, with these rules deciding every resend.
//
// Package replaysafetest has the receipt-counting scripted servers the
// tests use, for testing any client's replay behaviour.
package replaysafe
