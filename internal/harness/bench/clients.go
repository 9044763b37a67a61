package bench

//lint:file-ignore SA1019 the HTTP/2 peer is x/net/http2's own Transport, which issue 8 names; x/net's deprecation points to net/http.

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe"
)

// RoundTripper is what every client under test is.
type RoundTripper interface {
	http.RoundTripper
	CloseIdleConnections()
}

// Env is what a client is built for: the server's TLS configuration (nil
// for cleartext) and the idle connections to keep per host.
type Env struct {
	TLS     *tls.Config
	MaxIdle int
}

// Client is one client under test.
type Client struct {
	// Name ends the benchmark names ("replaysafe", "net-http"); it must
	// not end in "-digits", which go test appends for GOMAXPROCS.
	Name string
	// New builds the client.
	New func(Env) RoundTripper
}

// Replaysafe is the name of the client every other one is compared with.
const Replaysafe = "replaysafe"

// NetHTTP and XNetHTTP2 name the HTTP/1.1 and HTTP/2 peers, net/http's
// Transport and x/net's http2.Transport (QuicGoHTTP3 the HTTP/3 one).
const (
	NetHTTP   = "net-http"
	XNetHTTP2 = "x-net-http2"
)

// Release closes rt's idle connections and, for a client that has a
// Close (quic-go's http3.Transport, whose UDP socket and dropped
// connections CloseIdleConnections leaves open), closes it. Every user of
// a client ends with it.
func Release(rt RoundTripper) {
	rt.CloseIdleConnections()
	if c, ok := rt.(io.Closer); ok {
		c.Close()
	}
}

// Protocol is one wire protocol: its benchmark server and its clients,
// replaysafe first. Adding a protocol is adding an entry to Protocols.
type Protocol struct {
	// Name is the protocol's part of benchmark names: h1, h2, h3.
	Name string
	// Start starts the throughput and memory server. maxStreams is the
	// concurrency limit a multiplexing server advertises (0: its default).
	Start func(maxStreams uint32) (Server, error)
	// StartOrigins, when set, starts the idle-connection memory server
	// instead of Start(1): one serving n origins (ports of 127.0.0.1), for
	// a protocol whose clients keep one connection per origin however
	// many requests wait for it (HTTP/3: both clients wait for stream
	// credit rather than open a second QUIC connection).
	StartOrigins func(n int) (Server, error)
	// Bare opens n connections to the origins of srv that do the least a
	// client must to hold them open, for the memory baseline; closing the
	// result closes them all.
	Bare func(srv Server, n int) (io.Closer, error)
	// Settle is how long a memory measurement lets the process settle
	// before each reading; zero means 50 ms. A new QUIC connection keeps
	// changing for a while after its handshake (quic-go's timers, acks and
	// dropped handshake state): with 50 ms the HTTP/3 readings moved by
	// ±10 KiB per connection from run to run, with 400 ms by about 2 %.
	Settle time.Duration
	// Multiplexed protocols carry many requests per connection.
	Multiplexed bool
	// Clients are replaysafe and its peers.
	Clients []Client
	// Floors are reference clients measured in the round trips only
	// (BenchmarkRoundTrip), beside replaysafe and its peer: the peer with
	// a part of replaysafe's work added, which splits the difference
	// between the two (Floor).
	Floors []Client
}

// Protocols are the protocols every throughput and memory benchmark runs
// over.
var Protocols = []Protocol{
	{
		Name:  "h1",
		Start: func(uint32) (Server, error) { return StartH1() },
		Bare:  bareTCP("h1"),
		Clients: []Client{
			{Name: Replaysafe, New: func(e Env) RoundTripper {
				return replaysafe.New(replaysafe.Options{TLSClientConfig: e.TLS, MaxIdleConnsPerHost: e.MaxIdle, Protocol: replaysafe.ProtocolHTTP1})
			}},
			{Name: NetHTTP, New: newNetHTTP},
		},
		Floors: floorClients(NetHTTP, NewH1Floor),
	},
	{
		Name: "h2",
		Start: func(maxStreams uint32) (Server, error) {
			if maxStreams == 0 {
				maxStreams = 1000
			}
			return StartH2C(maxStreams)
		},
		Bare:        bareTCP("h2"),
		Multiplexed: true,
		Clients: []Client{
			{Name: Replaysafe, New: func(e Env) RoundTripper {
				return replaysafe.New(replaysafe.Options{TLSClientConfig: e.TLS, MaxIdleConnsPerHost: e.MaxIdle, Protocol: replaysafe.ProtocolHTTP2})
			}},
			{Name: XNetHTTP2, New: newXNetHTTP2},
		},
		Floors: floorClients(XNetHTTP2, NewH2Floor),
	},
	{
		Name:         "h3",
		Start:        func(maxStreams uint32) (Server, error) { return StartH3(maxStreams, 1) },
		StartOrigins: func(n int) (Server, error) { return StartH3(0, n) },
		Bare:         bareH3,
		Settle:       400 * time.Millisecond,
		Multiplexed:  true,
		Clients: []Client{
			{Name: Replaysafe, New: newReplaysafeH3},
			{Name: QuicGoHTTP3, New: newQuicGoHTTP3},
		},
		Floors: floorClients(QuicGoHTTP3, NewH3Floor),
	},
}

// RoundTripClients returns the clients the round-trip benchmarks run:
// Clients, then Floors.
func (p Protocol) RoundTripClients() []Client {
	return append(slices.Clip(p.Clients), p.Floors...)
}

// startIdle starts the server of the idle-connection measurement over n
// connections.
func (p Protocol) startIdle(n int) (Server, error) {
	if p.StartOrigins != nil {
		return p.StartOrigins(n)
	}
	return p.Start(1)
}

// newNetHTTP is net/http's Transport speaking HTTP/1.1, keeping as many
// idle connections per host as replaysafe does.
func newNetHTTP(e Env) RoundTripper {
	var p http.Protocols
	p.SetHTTP1(true)
	return &http.Transport{TLSClientConfig: e.TLS, MaxIdleConnsPerHost: e.MaxIdle, Protocols: &p}
}

// newXNetHTTP2 is x/net/http2's Transport: over TLS with ALPN h2, or h2c
// with prior knowledge when e.TLS is nil.
func newXNetHTTP2(e Env) RoundTripper {
	t := &http2.Transport{TLSClientConfig: e.TLS}
	if e.TLS == nil {
		t.AllowHTTP = true
		t.DialTLSContext = func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	return t
}
