// Package conformance runs fault scenarios over loopback against
// replaysafe's Transport and net/http's, side by side, and counts at the
// server how many copies of the request arrived.
//
// Each Scenario scripts a replaysafetest server per connection (a
// close crossing a request, an idle close the client saw or that is still
// in flight, a partial status line, a malformed response, a lone 1xx, a
// hang) and drives a client through it; each runs over every Network
// (plain TCP with FIN or RST, TLS with close_notify or cut abruptly). A run
// uses a fresh server and a fresh client, so runs never share state.
//
// A close still in flight is modelled by the Dialer's TapConn: it holds
// back what the client's read returns once the server closed an idle
// connection, until the client has written its next request, as when the
// FIN crosses the request on the wire. Both clients dial through the same
// Dialer.
//
// Main is the `replaysafe conformance` command; docs/guarantees.md shows
// its table.
package conformance
