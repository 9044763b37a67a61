package h3server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// quic-go's http3.Transport resends a request rejected with
// H3_REQUEST_REJECTED on a new connection. The server rejects the first
// connection's request and answers the second: the origin received two
// copies of the one GET.
func Example() {
	s, err := h3server.New(h3server.Config{
		Conns:   []h3server.ConnScript{{Streams: []h3server.Action{h3server.Reject()}}},
		Default: h3server.Every(h3server.OK("hello")),
	})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	tr := &http3.Transport{TLSClientConfig: s.ClientTLSConfig()}
	defer tr.Close()
	res, err := (&http.Client{Transport: tr}).Get(s.URL() + "/greeting")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.Proto, res.StatusCode, string(body))

	rs, err := s.WaitRequests(context.Background(), 2)
	if err != nil {
		panic(err)
	}
	for _, r := range rs {
		fmt.Println("conn", r.Conn, "stream", r.Stream, r.Method, r.Path, r.Action)
	}
	// Output:
	// HTTP/3.0 200 hello
	// conn 0 stream 0 GET /greeting refuse
	// conn 1 stream 0 GET /greeting respond
}

// Per-connection, per-stream scripts: on connection 0 the first request
// is answered and the second gets a GOAWAY proving it unprocessed, then
// the connection closes; every later connection answers everything.
func ExampleConfig() {
	cfg := h3server.Config{
		Conns: []h3server.ConnScript{{
			Streams: []h3server.Action{
				h3server.OK("first"),
				h3server.GoAwayRejecting().WithClose(),
			},
		}},
		Default: h3server.Every(h3server.OK("fresh connection")),
	}
	for _, a := range cfg.Conns[0].Streams {
		fmt.Println(a)
	}
	fmt.Println(*cfg.Default.Default)
	// Output:
	// respond@after-body status=200
	// goaway@on-headers id=stream+0 close=H3_NO_ERROR
	// respond@after-body status=200
}
