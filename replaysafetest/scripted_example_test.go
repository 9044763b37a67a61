package replaysafetest_test

import (
	"fmt"
	"io"
	"net/http"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

// copiesOf prints how many copies of path a scripted server received,
// whichever server it is.
func copiesOf(s replaysafetest.Scripted, path string) {
	fmt.Printf("%s: %d copies on %d connections\n", path, replaysafetest.Copies(s)[path], s.Accepted())
}

// Testing a client's replay behaviour: net/http's Transport against a
// close that crosses its second request (it resends the GET on a new
// connection), and against an HTTP/2 server that refuses the first
// stream (it resends the POST: REFUSED_STREAM proves nothing was
// processed).
func ExampleScripted() {
	h1, err := replaysafetest.Start(replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)),
	}})
	if err != nil {
		panic(err)
	}
	defer h1.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	for _, path := range []string{"/warm", "/target"} {
		resp, err := tr.RoundTrip(mustRequest("GET", h1.URL()+path))
		if err != nil {
			panic(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	copiesOf(h1, "/target")

	h2, err := h2server.New(h2server.Config{TLS: true, Conns: []h2server.ConnScript{{Streams: []h2server.Action{h2server.Refuse()}}}})
	if err != nil {
		panic(err)
	}
	defer h2.Close()
	tr2 := &http.Transport{TLSClientConfig: h2.ClientTLSConfig(), ForceAttemptHTTP2: true}
	defer tr2.CloseIdleConnections()
	resp, err := tr2.RoundTrip(mustRequest("POST", h2.URL()+"/order"))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	copiesOf(h2, "/order")
	// Output:
	// /target: 2 copies on 2 connections
	// /order: 2 copies on 1 connections
}

func mustRequest(method, url string) *http.Request {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		panic(err)
	}
	if method == "POST" {
		req.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	return req
}
