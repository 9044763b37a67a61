package h2server_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// A server that refuses every stream on every connection, driven by one
// HTTP/2 connection used directly (no retry loop).
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
	cc, err := h2.NewClientConn(nc, h2.Config{})
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	req, _ := http.NewRequest("GET", s.URL()+"/", nil)
	cc.Reserve()
	_, err = cc.RoundTrip(req, nil)
	fmt.Println(err)

	if err := s.WaitRequests(context.Background(), 1); err != nil {
		panic(err)
	}
	r := s.Requests()[0]
	fmt.Println(s.Count(), r.Conn, r.StreamID, r.Method, r.Path, r.Action)
	// Output:
	// h2: stream 1 reset with REFUSED_STREAM by the server
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
