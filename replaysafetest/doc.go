// Package replaysafetest is a test kit for HTTP clients that resend
// requests: scripted servers that misbehave on cue and count, at the
// server, every copy of every request they receive. Use it to test your
// own client's replay behaviour the way OkHttp's MockWebServer is used:
// script the fault, drive your client through it, and assert how many
// copies arrived and what your client returned.
//
// The kit has four servers, all on 127.0.0.1 with a kernel-chosen port,
// all satisfying Scripted (Addr, URL, Accepted, Receipts, Close):
//
//   - Server (this package, Start): HTTP/1.1 over TCP or TLS, scripted
//     per connection and per request: close crossing a request, idle
//     closes, partial or malformed responses, 1xx without end, hangs.
//   - h2server: HTTP/2 (TLS with ALPN, or h2c) frame by frame: refuse a
//     stream, reset it, GOAWAY with a chosen last stream ID, refuse a
//     body sent before the SETTINGS ACK, GOAWAY after N requests.
//   - h3server: HTTP/3 over QUIC: reject, reset, GOAWAY, close a
//     connection as a request arrives, stop sending.
//   - connectproxy: a CONNECT proxy (plain or TLS) and a SOCKS5 proxy
//     that count the tunnels they open, answer any status, pipeline bytes
//     after a 200, cut idle tunnels.
//
// Copies(s) counts the receipts per path, so a test that gives each
// request its own path (or query) reads the copies of each at once.
//
// # The HTTP/1.1 server
//
// The server listens on 127.0.0.1 only. Every request is recorded as a
// Received — exact raw bytes, parsed fields, connection index and position
// on the connection — before the server acts on it, so a test can count
// how many copies of a request the origin got, even when the server then
// closes the connection without answering.
//
// Behaviour is scripted per connection: Config.Conns[i] drives the i-th
// accepted connection, and within a ConnScript the j-th Action handles the
// j-th request. Actions answer normally (OK, Respond), close in the various
// ways a client must survive (RespondClose, RespondThenCloseOnNext, Drop,
// IdleClose), send broken or incomplete responses (PartialStatus,
// Interim100, EarlyHints, Malformed, RawThenClose), or never answer (Hang).
// Closes are a FIN (with a TLS close_notify first, over TLS), a FIN without
// close_notify, or an RST; see CloseMode.
//
// A close crossing a request is made deterministic with
// RespondThenCloseOnNext: the client sends request 1 on a keep-alive
// connection and reads the response, then sends request 2 on the same
// connection; the server reads request 2 in full, records it (Conn 0,
// Seq 1) and closes without answering. The client sees io.EOF (CloseFIN,
// CloseFINNoNotify) or ECONNRESET (CloseRST) instead of a response, and the
// test knows the origin did receive the request.
//
// Points to keep in mind:
//
//   - A FIN close turns into an RST if the kernel still holds unread bytes
//     from the client (data pipelined behind a closing action). Bytes the
//     server has already read when it closes are recorded: as complete
//     requests if they are, else as partial ones.
//   - ConnClosed and WaitConnClosed change just after the close system
//     call, so a client may see the close a moment before ConnClosed is
//     true: wait with WaitConnClosed rather than polling ConnClosed once.
//   - The server reads a request body at once and never sends
//     100 Continue by itself; a client that waits for one sends the body
//     after its own timeout.
//   - Conns counts TCP accepts, including connections whose TLS handshake
//     failed.
//   - Close closes every open connection abruptly (no close_notify).
//
// Every read and write has a deadline and every goroutine exits in Close.
package replaysafetest
