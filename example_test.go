package replaysafe_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h3early"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// A kept-alive connection closes just as the next GET goes out: the
// server received the request, closed without answering, and the client
// read EOF. GET is idempotent and the connection was reused, so
// replaysafe resends it once on a new connection (RS20). The loopback
// server counts the copies it received.
func Example() {
	srv, err := replaysafetest.Start(replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	tr := replaysafe.New(replaysafe.Options{Observer: replaysafe.Observer{
		OnAttempt: func(a replaysafe.AttemptReport) {
			fmt.Printf("%s attempt %d: %s %s %s\n", a.Request.URL.Path, a.Number, a.Decision.Action, a.Decision.Rule.ID(), a.Decision.Rule)
		},
	}})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	for _, path := range []string{"/first", "/second"} {
		resp, err := client.Get(srv.URL() + path)
		if err != nil {
			fmt.Println(err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s: %d %s\n", path, resp.StatusCode, body)
	}
	fmt.Println("copies of /second at the server:", len(copies(srv, "/second")))
	// Output:
	// /first attempt 1: deliver RS02 deliver-final-response
	// /first: 200 ok
	// /second attempt 1: resend RS20 ambiguous-idempotent-resend
	// /second attempt 2: deliver RS02 deliver-final-response
	// /second: 200 ok
	// copies of /second at the server: 2
}

// The same close under a POST: the server may have processed it, so it is
// never sent again, and the error names the rule that decided.
func Example_notIdempotent() {
	srv, err := replaysafetest.Start(replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	tr := replaysafe.New(replaysafe.Options{})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	resp, err := client.Get(srv.URL() + "/warm")
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	_, err = client.Post(srv.URL()+"/pay", "text/plain", strings.NewReader("10 EUR"))
	var rerr *replaysafe.Error
	if errors.As(err, &rerr) {
		fmt.Println("rule:", rerr.Rule.ID(), rerr.Rule)
		fmt.Println("attempts:", rerr.Attempts)
		fmt.Println("connection closed under it:", errors.Is(err, io.EOF))
	}
	fmt.Println("copies of /pay at the server:", len(copies(srv, "/pay")))
	// Output:
	// rule: RS18 ambiguous-not-idempotent
	// attempts: 1
	// connection closed under it: true
	// copies of /pay at the server: 1
}

// Over HTTP/3 a server can prove it did not process a request: it resets
// the stream with H3_REQUEST_REJECTED (RFC 9114 §4.1.1). replaysafe then
// resends even a POST, once, on a new QUIC connection (RS15). The loopback
// server counts the copies it received.
func Example_http3() {
	srv, err := h3server.New(h3server.Config{Conns: []h3server.ConnScript{
		{Streams: []h3server.Action{h3server.Reject()}},
	}})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	tr := replaysafe.New(replaysafe.Options{
		Protocol:        replaysafe.ProtocolHTTP3,
		TLSClientConfig: srv.ClientTLSConfig(),
		Observer: replaysafe.Observer{OnAttempt: func(a replaysafe.AttemptReport) {
			fmt.Printf("attempt %d: %s %s %s\n", a.Number, a.Decision.Action, a.Decision.Rule.ID(), a.Decision.Rule)
		}},
	})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	resp, err := client.Post(srv.URL()+"/order", "text/plain", strings.NewReader("1 book"))
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("%s %d %s\n", resp.Proto, resp.StatusCode, body)
	n := 0
	for _, r := range srv.Requests() {
		if r.Path == "/order" {
			n++
		}
	}
	fmt.Println("copies of /order at the server:", n, "on connections", srv.Requests()[0].Conn, "and", srv.Requests()[1].Conn)
	// Output:
	// attempt 1: resend RS15 evidence-request-rejected
	// attempt 2: deliver RS02 deliver-final-response
	// HTTP/3.0 200 ok
	// copies of /order at the server: 2 on connections 0 and 1
}

// With EarlyData, a GET on a new HTTP/3 connection that resumes an
// earlier session goes as 0-RTT, beside the handshake (RS32). This server
// resumes the session but rejects the early data: it processed none of
// it, and the GET goes again at once after the handshake, as the call's
// automatic resend (RS33). The server counts what it processed.
func ExampleOptions_earlyData() {
	srv, err := h3early.New(h3early.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	tr := replaysafe.New(replaysafe.Options{
		Protocol:        replaysafe.ProtocolHTTP3,
		TLSClientConfig: srv.ClientTLSConfig(),
		EarlyData:       true,
		Observer: replaysafe.Observer{OnAttempt: func(a replaysafe.AttemptReport) {
			if a.Request.URL.Path == "/page" {
				fmt.Printf("attempt %d: early=%v %s %s\n", a.Number, a.Events[0].Early, a.Decision.Action, a.Decision.Rule.ID())
			}
		}},
	})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(path string) {
		resp, err := client.Get(srv.URL() + path)
		if err != nil {
			panic(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get("/session") // a first connection, whose ticket the next one resumes
	tr.CloseIdleConnections()
	srv.Reject(true)
	get("/page")
	fmt.Println("copies of /page the server processed:", len(srv.Copies("/page")))
	// Output:
	// attempt 1: early=true resend RS33
	// attempt 2: early=false deliver RS02
	// copies of /page the server processed: 1
}

// A configured retry policy: the GET's 503s are retried after a short
// jittered wait, the POST's is delivered, since a POST without an
// Idempotency-Key may have had its effect. The call rules decide each
// step; the server counts the copies.
func ExampleRetry() {
	srv, err := replaysafetest.Start(replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(
		replaysafetest.Respond(503, "busy"), replaysafetest.Respond(503, "busy"), replaysafetest.OK(),
		replaysafetest.Respond(503, "busy"))}})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	tr := replaysafe.New(replaysafe.Options{
		Retry: replaysafe.Retry{MaxAttempts: 4, BaseDelay: 10 * time.Millisecond},
		Observer: replaysafe.Observer{OnAttempt: func(a replaysafe.AttemptReport) {
			fmt.Printf("%s %s attempt %d: %s %s %s\n", a.Request.Method, a.Request.URL.Path, a.Number, a.Call.Action, a.Call.Rule.ID(), a.Call.Rule)
		}},
	})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	resp, err := client.Get(srv.URL() + "/report")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("GET:", resp.StatusCode)

	resp, err = client.Post(srv.URL()+"/pay", "text/plain", strings.NewReader("10 EUR"))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("POST:", resp.StatusCode)
	fmt.Println("copies at the server:", replaysafetest.Copies(srv))
	// Output:
	// GET /report attempt 1: resend RS23 retry-status
	// GET /report attempt 2: resend RS23 retry-status
	// GET /report attempt 3: deliver RS02 deliver-final-response
	// GET: 200
	// POST /pay attempt 1: deliver RS02 deliver-final-response
	// POST: 503
	// copies at the server: map[/pay:1 /report:3]
}

// callErrKey keys the slot, in a request's context, where OnError puts
// the call's error.
type callErrKey struct{}

// Under http.Client.Timeout, net/http may replace the error of a call
// that timed out with one of its own that keeps only the text, so
// errors.As finds no *replaysafe.Error in what Client.Do returns.
// Observer.OnError receives the *Error before RoundTrip returns, with the
// request net/http handed over, whose context derives from the caller's:
// a slot the caller put in the context carries it back. With a deadline
// on the request's context instead, which is the recommended bound,
// Client.Do returns the *Error itself (RS06). The server never answers;
// it counts the copies it received.
func ExampleObserver_clientTimeout() {
	hang := replaysafetest.Script(replaysafetest.Hang(5 * time.Second))
	srv, err := replaysafetest.Start(replaysafetest.Config{Default: &hang})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	tr := replaysafe.New(replaysafe.Options{Observer: replaysafe.Observer{
		OnError: func(req *http.Request, err error) {
			if slot, ok := req.Context().Value(callErrKey{}).(*error); ok {
				*slot = err
			}
		},
	}})
	defer tr.CloseIdleConnections()

	// Client.Timeout: the *Error comes through the slot.
	var callErr error
	ctx := context.WithValue(context.Background(), callErrKey{}, &callErr)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL()+"/client-timeout", nil)
	if _, err := (&http.Client{Transport: tr, Timeout: 100 * time.Millisecond}).Do(req); err == nil {
		panic("no timeout")
	}
	var rerr *replaysafe.Error
	fmt.Println("Client.Timeout, OnError's *Error:", errors.As(callErr, &rerr), "after", rerr.Attempts, "attempt")

	// The request's context: Client.Do returns the *Error.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", srv.URL()+"/ctx-timeout", nil)
	_, err = (&http.Client{Transport: tr}).Do(req)
	fmt.Println("request deadline, Client.Do's *Error:", errors.As(err, &rerr), rerr.Rule.ID(), rerr.Rule)
	fmt.Println("copies at the server:", len(copies(srv, "/client-timeout")), len(copies(srv, "/ctx-timeout")))
	// Output:
	// Client.Timeout, OnError's *Error: true after 1 attempt
	// request deadline, Client.Do's *Error: true RS06 timeout
	// copies at the server: 1 1
}

// A GET whose first copy stalls: after Retry.Hedge with no response
// header a second copy goes out on another connection and answers; the
// stalled copy is canceled. The loopback server's first connection never
// answers, and the server counts the copies it received.
func ExampleRetry_hedge() {
	srv, err := replaysafetest.Start(replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.Hang(0)),
		replaysafetest.Script(replaysafetest.Respond(200, "from the hedge")),
	}})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	tr := replaysafe.New(replaysafe.Options{Retry: replaysafe.Retry{
		MaxAttempts: 2, // every copy counts
		Hedge:       20 * time.Millisecond, MaxHedges: 1,
	}})
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL() + "/slow")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("%s; the server received %d copies\n", body, srv.Count())
	// Output: from the hedge; the server received 2 copies
}
