// Package conformance runs fault scenarios over loopback against
// replaysafe's Transport and its peers (net/http, x/net/http2,
// quic-go/http3) side by side, and counts at the server how many copies
// of the request arrived.
//
// Every scenario is a text file under testdata/ (see Scenario for the
// format): the scripted server (replaysafetest, h2server or h3server, and
// optionally a connectproxy in front), the client's steps, and the
// expected outcome and copies per network and client. One runner serves
// every protocol: each run gets a fresh server, proxy and client, so runs
// never share state. Adding a case is adding a file;
// `go test ./internal/harness/conformance -rewrite` writes what the runs did back
// into the files' expectations.
//
// Every replaysafe attempt of every run goes through a tracecheck.Checker
// (via Options.Observer): a trace that fsm and the model replay
// differently fails its row, and the trace is printed.
//
// Over HTTP/1.1 a close still in flight is modelled by the Dialer's
// TapConn: it holds back what the client's read returns once the server
// closed an idle connection, until the client has written its next
// request, as when the FIN crosses the request on the wire. Both clients
// dial through the same Dialer.
//
// Main is the `replaysafe conformance` command; docs/guarantees.md shows
// its table.
package conformance
