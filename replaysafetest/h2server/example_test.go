package h2server_test

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"context"
	"fmt"
	"net/http"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

// A server that refuses every stream on every connection, driven by an
// x/net ClientConn used directly (no Transport retry loop).
func Example_refuseEverything() {
	s, err := h2server.New(h2server.Config{Default: h2server.Every(h2server.Refuse())})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	nc, err := s.Dial(context.Background())
	if err != nil {
		panic(err)
	}
	cc, err := (&http2.Transport{}).NewClientConn(nc)
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	req, _ := http.NewRequest("GET", s.URL()+"/", nil)
	_, err = cc.RoundTrip(req)
	fmt.Println(err)

	if err := s.WaitRequests(context.Background(), 1); err != nil {
		panic(err)
	}
	r := s.Requests()[0]
	fmt.Println(s.Count(), r.Conn, r.StreamID, r.Method, r.Path, r.Action)
	// Output:
	// stream error: stream ID 1; REFUSED_STREAM; received from peer
	// 1 0 1 GET / refuse
}

// Per-connection, per-stream scripts: on connection 0 the first stream is
// answered and the second gets a GOAWAY whose last stream ID is the first;
// every later connection answers everything.
func ExampleConfig() {
	cfg := h2server.Config{
		TLS: true,
		Conns: []h2server.ConnScript{{
			Streams: []h2server.Action{
				h2server.OK("first"),
				h2server.GoAwayBelow().WithClose(h2server.CloseFIN),
			},
		}},
		Default: h2server.Every(h2server.OK("fresh connection")),
	}
	for _, a := range cfg.Conns[0].Streams {
		fmt.Println(a)
	}
	// Output:
	// respond@after-body status=200
	// goaway@on-headers last=stream-2 code=NO_ERROR close=fin
}
