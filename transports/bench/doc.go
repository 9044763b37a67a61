// Package bench measures replaysafe beside the clients it replaces, in one
// run, and reports the ratios (issue 8).
//
// The benchmarks live in this package's tests (go test -bench . ./transports/bench/);
// the harness they share with the `replaysafe bench` command is ordinary
// code here:
//
//   - Protocols: one entry per wire protocol (h1, h2), each with its
//     loopback server and its clients, replaysafe and its peers. Adding a
//     protocol (HTTP/3) or a peer is adding a table entry.
//   - Recoveries: stale-connection scenarios at the scripted servers that
//     count receipts (transports/scripted, transports/scripted/h2server),
//     each with the copies the server must have received per call.
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
// keep-alive server and a frame-level h2c server, both on 127.0.0.1. They
// run in the benchmark's process, so allocs/op include the server's few
// allocations and the harness's request value; both are the same for every
// client.
package bench
