// Package h1 turns what net/http's HTTP/1.1 client connection lets one
// observe into fsm events.
//
// Three sources feed one attempt's fsm.Machine, through a Recorder:
//
//   - a Conn wrapped around the connection handed to net/http, which sees
//     every byte the stack writes and reads: the first request byte that
//     reached the socket (EventFirstByteWritten), the first response byte
//     of any kind (EventFirstResponseByte), and the read or write error
//     the stack met, if any;
//   - httptrace callbacks: WroteRequest (the request was serialised),
//     GotFirstResponseByte and Got1xxResponse (EventInformational);
//   - the error a round trip returned, classified with errors.Is and
//     errors.As (Classify), never by its text.
//
// net/http calls WroteHeaders and WroteRequest when the request has been
// serialised into its write buffer, before that buffer is flushed to the
// socket. Neither proves a byte went out, so only Conn reports
// EventFirstByteWritten, and EventRequestWritten waits for both the
// WroteRequest callback and the first byte on the socket.
//
// The Recorder also keeps the machine's clock duty: after every step it
// arms a timer for Machine.Deadline and feeds EventTick when it fires.
//
// Its Got1xxResponse hook bounds the informational responses (net/http
// counts none once a hook is installed). When the request's context
// already carries the caller's Got1xxResponse, compose the two yourself,
// the Recorder's first: httptrace.WithClientTrace would return the
// caller's verdict alone, and the bound would be gone.
package h1
