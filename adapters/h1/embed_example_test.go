package h1_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"

	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

// A client of its own on net/http's single-connection ClientConn, with
// fsm deciding when a request goes out again (docs/embedding.md). The
// server answers /first and closes the kept-alive connection as /second
// arrives: the client's recorder sees the request written, no response
// byte, the connection closed. GET is idempotent and the connection was
// reused, so the attempt's machine decides a resend (RS20); the call
// machine (fsm.Call) counts it and hands out the resend's facts, and the
// client sends /second once more on a new connection. The server counts
// the copies.
func Example_embedding() {
	srv, err := replaysafetest.Start(replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	c := &client{}
	defer c.drop()

	for _, path := range []string{"/first", "/second"} {
		body, err := c.get(srv.URL() + path)
		fmt.Printf("%s: %q %v\n", path, body, err)
	}
	n := 0
	for _, r := range srv.Requests() {
		if r.Target == "/second" {
			n++
		}
	}
	fmt.Println("copies of /second at the server:", n)
	// Output:
	// /first attempt 1: deliver RS02 deliver-final-response
	// /first: "ok" <nil>
	// /second attempt 1: resend RS20 ambiguous-idempotent-resend
	// /second attempt 2: deliver RS02 deliver-final-response
	// /second: "ok" <nil>
	// copies of /second at the server: 2
}

// client keeps one HTTP/1.1 connection: net/http's ClientConn over an
// h1.Conn, which reports to the attempt's Recorder what reached the
// socket and what came back.
type client struct {
	clock recorder.Clock
	conn  *h1.Conn // the connection the ClientConn runs over
	cc    *http.ClientConn
}

// connect returns the client's connection and whether it carried an
// exchange before; fresh asks for a new one (a resend's).
func (c *client) connect(ctx context.Context, addr string, fresh bool) (reused bool, err error) {
	if c.cc != nil && !fresh && c.cc.Err() == nil && !c.conn.Stale() {
		return true, nil
	}
	c.drop()
	factory := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c.conn = h1.NewConn(raw, nil) // plain TCP: no WireCounter beneath TLS
		return c.conn, nil
	}}
	c.cc, err = factory.NewClientConn(ctx, "http", addr)
	return false, err
}

func (c *client) drop() {
	if c.cc != nil {
		c.cc.Close()
		c.cc = nil
	}
}

// get sends a GET for url, and sends it again when, and only when, fsm
// says so.
func (c *client) get(url string) (string, error) {
	if c.clock == nil {
		c.clock = recorder.NewClock()
	}
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return "", err
	}
	// The call machine bounds the attempts of the whole call; each attempt
	// has a machine of its own, inside its Recorder.
	call := fsm.NewCall(fsm.Request{Method: fsm.ParseMethod(req.Method), Body: fsm.BodyNone}, nil)
	for {
		facts := call.Next() // the original's facts, then the resend's
		rec := h1.NewRecorder(facts, fsm.Limits{}, c.clock, nil)
		reused, err := c.connect(req.Context(), req.URL.Host, facts.Attempt == fsm.AttemptResend)
		if err != nil {
			rec.AcquireFailed(req.Context())
			return "", err
		}
		if err := c.conn.Attach(rec); err != nil {
			return "", err
		}
		rec.Acquired(reused)
		var body []byte
		var d fsm.Decision
		resp, err := c.cc.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), rec.ClientTrace())))
		status := 0
		if err != nil {
			d = rec.Fail(err, req.Context(), nil)
		} else if d = rec.FinalHeaders(); d.Action == fsm.ActionDeliver {
			status = resp.StatusCode
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				d = rec.Fail(err, req.Context(), nil)
			} else {
				d = rec.Complete()
			}
		}
		c.conn.Detach()
		rec.Stop()
		if d.Conn != fsm.ConnReuse {
			c.drop()
		}
		fmt.Printf("%s attempt %d: %s %s %s\n", req.URL.Path, call.Attempts()+1, d.Action, d.Rule.ID(), d.Rule)
		cd := call.Step(fsm.Outcome{Decision: d, Facts: rec.Facts(), Status: status})
		switch cd.Action {
		case fsm.ActionDeliver:
			return string(body), err
		case fsm.ActionResend:
			continue // at once, on a new connection
		}
		return "", fmt.Errorf("failed by %s %s after %d attempt(s): %w", cd.Rule.ID(), cd.Rule, call.Attempts(), err)
	}
}
