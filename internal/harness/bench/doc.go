// Package bench measures replaysafe beside the clients it replaces, in one
// run, and reports the ratios (issue 8).
//
// The benchmarks live in this package's tests (go test -bench . ./internal/harness/bench/);
// the harness they share with the `replaysafe bench` command is ordinary
// code here:
//
//   - Protocols: one entry per wire protocol (h1, h2, h3), each with its
//     loopback server and its clients, replaysafe and its peers (net/http,
//     x/net/http2, quic-go's http3.Transport). Adding a protocol or a peer
//     is adding a table entry.
//   - Recoveries: stale-connection scenarios at the scripted servers that
//     count receipts (replaysafetest, replaysafetest/h2server,
//     replaysafetest/h3server), each with the copies the server must
//     have received per call. A peer that cannot recover from a scenario
//     is listed in it (Recovery.Failing) with the copies it leaves: the
//     tests check that it fails so, and the benchmark measures replaysafe
//     alone.
//   - Memory: bytes held per idle pooled connection and per in-flight
//     request, from runtime.MemStats deltas.
//   - Parse, Pairs, WriteTable, WriteSVG: benchmark output to ratios, a
//     table and a plot; Main is the `replaysafe bench` command.
//
// Benchmark names end in the client's name (".../replaysafe",
// ".../net-http"); rows that differ only in it are compared. A ratio is
// always peer ÷ replaysafe, so 1.0 or more means replaysafe is at least as
// good (faster, fewer allocations, fewer bytes).
//
// The servers are deliberately small and allocate little per request, so
// that what a benchmark measures is the client: a hand-written HTTP/1.1
// keep-alive server and a frame-level h2c server, both on 127.0.0.1. The
// HTTP/3 server is quic-go's http3.Server with a trivial handler, over UDP
// on 127.0.0.1 with an in-memory self-signed certificate: it allocates
// more per request (a goroutine and a few dozen objects), the same for
// both clients. They run in the benchmark's process, so allocs/op include
// the server's allocations and the harness's request value; both are the
// same for every client.
package bench
