package bench

//lint:file-ignore SA1019 the HTTP/2 peer is x/net/http2's own Transport, which issue 8 names; x/net's deprecation points to net/http.

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/transports"
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

// Protocol is one wire protocol: its benchmark server and its clients,
// replaysafe first. Adding HTTP/3 is adding an entry to Protocols.
type Protocol struct {
	// Name is the protocol's part of benchmark names: h1, h2.
	Name string
	// Start starts the throughput and memory server. maxStreams is the
	// concurrency limit a multiplexing server advertises (0: its default).
	Start func(maxStreams uint32) (Server, error)
	// Bare opens a connection to addr that does the least a client must
	// to hold it open, for the memory baseline.
	Bare func(addr string) (net.Conn, error)
	// Multiplexed protocols carry many requests per connection.
	Multiplexed bool
	// Clients are replaysafe and its peers.
	Clients []Client
}

// Protocols are the protocols every throughput and memory benchmark runs
// over.
var Protocols = []Protocol{
	{
		Name:  "h1",
		Start: func(uint32) (Server, error) { return StartH1() },
		Bare:  func(addr string) (net.Conn, error) { return bareConn("h1", addr) },
		Clients: []Client{
			{Name: Replaysafe, New: func(e Env) RoundTripper {
				return transports.New(transports.Options{TLSClientConfig: e.TLS, MaxIdleConnsPerHost: e.MaxIdle})
			}},
			{Name: "net-http", New: newNetHTTP},
		},
	},
	{
		Name: "h2",
		Start: func(maxStreams uint32) (Server, error) {
			if maxStreams == 0 {
				maxStreams = 1000
			}
			return StartH2C(maxStreams)
		},
		Bare:        func(addr string) (net.Conn, error) { return bareConn("h2", addr) },
		Multiplexed: true,
		Clients: []Client{
			{Name: Replaysafe, New: func(e Env) RoundTripper {
				return transports.New(transports.Options{TLSClientConfig: e.TLS, MaxIdleConnsPerHost: e.MaxIdle, Protocol: transports.ProtocolHTTP2})
			}},
			{Name: "x-net-http2", New: newXNetHTTP2},
		},
	},
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
