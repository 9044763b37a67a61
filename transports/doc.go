// Package transports carries out what fsm decides: it dispatches HTTP
// requests over real connections, feeds every observation of every wire
// attempt to an fsm.Machine through an adapter, and acts on each decision:
// deliver the response, fail with an *Error naming the rule, or resend
// once, at once, on a freshly dialed connection.
//
// Transport is the HTTP/1.1 dispatcher, over TCP and TLS, built on net/http's
// single-connection client (http.Transport.NewClientConn) and
// adapters/h1. docs/guarantees.md states what it guarantees, with the
// conformance table (package transports/conformance) that shows it.
package transports
