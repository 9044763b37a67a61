package h2_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// A request refused by the server (REFUSED_STREAM), then one answered,
// on one h2c connection; the first error says the request was not
// processed.
func Example() {
	s, err := h2server.New(h2server.Config{Conns: []h2server.ConnScript{{
		Streams: []h2server.Action{h2server.Refuse(), h2server.OK("hello")},
	}}})
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

	for range 2 {
		if !cc.Reserve() {
			panic("connection full")
		}
		req, _ := http.NewRequest("GET", s.URL()+"/", nil)
		res, err := cc.RoundTrip(req, nil)
		var se *h2.StreamError
		switch {
		case errors.As(err, &se) && se.Unprocessed():
			fmt.Println("refused, not processed: may be sent again")
		case err != nil:
			fmt.Println("error:", err)
		default:
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			fmt.Println(res.Status, string(body))
		}
	}
	// Output:
	// refused, not processed: may be sent again
	// 200 OK hello
}
