// Package interop runs replaysafe against real servers nobody here
// wrote: nginx, haproxy and caddy, the Debian packages .ci/setup installs.
// Each row starts its own server as the current user on free loopback
// ports, with a configuration generated into its directory (certificate
// from package selfsigned, logs, pid and temporary files there too), and
// stops it at the end.
//
// Copies are counted per request by an X-Request-Id header field that
// every request carries: nginx and caddy write it to their own access log
// (one line per request they processed), and haproxy, a proxy, passes
// requests to a tiny Go origin (Origin) that counts them.
//
// A row is a server configuration and a run: one fresh client driving
// one scenario (a request timed to cross the server's idle close, a
// sequence, a burst, a restart). Each row runs with replaysafe beside
// net/http, x/net/http2 and quic-go/http3 where they apply; every
// replaysafe attempt trace goes through package tracecheck. Run prints
// one table per server and fails when a request was received more than
// twice, a POST twice, a trace check failed, replaysafe missed a
// delivery in a row where it must deliver, or a row did not show what it
// exists to show (Row.Shows): a request crossing the server's close, a
// resend (both from replaysafe's observer), HTTP/3 (every response
// delivered over it, and the copies in the server's log). Which runs
// cross a close depends on timing, so a crossing row runs more batches
// of its sweep, up to a bound, until one does. docs/interop.md holds the
// tables of a full run and what to configure against each server.
package interop
