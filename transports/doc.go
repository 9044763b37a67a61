// Package transports carries out what fsm decides: it dispatches HTTP
// requests over real connections, feeds every observation of every wire
// attempt to an fsm.Machine through an adapter, and acts on each decision:
// deliver the response, fail with an *Error naming the rule, or resend
// once, at once, on a freshly dialed connection.
//
// Transport is the dispatcher: HTTP/1.1 over TCP and TLS on net/http's
// single-connection client (http.Transport.NewClientConn) and adapters/h1;
// HTTP/2 on x/net's ClientConn and adapters/h2; HTTP/3 over QUIC on
// quic-go's ClientConn and adapters/h3 (Options.Protocol chooses).
// docs/guarantees.md states what it guarantees, with the conformance tables
// (package transports/conformance) that show it.
package transports
