package forward_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"

	"github.com/replaysafe/replaysafe/forward"
)

// A forwarder in front of an upstream: the upstream sees the Via the
// forwarder added and none of the fields the client's Connection named.
func ExampleForwarder() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream got %s %s, Via %q, X-Hop %q", r.Method, r.URL, r.Header.Get("Via"), r.Header.Get("X-Hop"))
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)

	fw := forward.New(forward.Options{Upstream: u, Egress: forward.EgressHTTP1})
	defer fw.Transport().CloseIdleConnections()
	front := httptest.NewServer(fw)
	defer front.Close()

	req, _ := http.NewRequest("GET", front.URL+"/hello?x=1", nil)
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "for the forwarder only")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, resp.Header.Get("Via"))
	fmt.Println(string(body))
	// Output:
	// 200 OK 1.1 replaysafe
	// upstream got GET /hello?x=1, Via "1.1 replaysafe", X-Hop ""
}
