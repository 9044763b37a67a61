package h2server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// client is one of this project's HTTP/2 connections to the server: a
// client with no retry loop of its own, whose errors carry the evidence
// the server's actions are meant to produce.
type client struct{ cc *h2.ClientConn }

// clientConn dials the server and starts an HTTP/2 connection on it.
func clientConn(t *testing.T, s *h2server.Server) client {
	t.Helper()
	nc, err := s.Dial(ctxT(t))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	cc, err := h2.NewClientConn(nc, h2.Config{})
	if err != nil {
		nc.Close()
		t.Fatalf("NewClientConn: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return client{cc}
}

// RoundTrip reserves a stream and sends req on it.
func (c client) RoundTrip(req *http.Request) (*http.Response, error) {
	if !c.cc.Reserve() {
		return nil, errors.New("the connection takes no new stream")
	}
	return c.cc.RoundTrip(req, nil)
}

func request(t *testing.T, ctx context.Context, s *h2server.Server, method, path string, body []byte) *http.Request {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, r)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestClientConnRespondLargeBodiesAndTrailers(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		reqBody := bytes.Repeat([]byte("request-"), 40_000) // 320 000 bytes
		respBody := bytes.Repeat([]byte("response"), 25_000)
		cfg := one(h2server.Respond(200, http.Header{"X-A": {"1"}}, respBody).
			WithTrailer(http.Header{"X-Trailer": {"end"}}))
		cfg.TLS = useTLS
		s := start(t, cfg)
		cc := clientConn(t, s)
		req := request(t, ctxT(t), s, "POST", "/big", reqBody)
		req.Header.Set("X-Custom", "yes")
		res, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatalf("RoundTrip: %v", err)
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("body: %v", err)
		}
		if !bytes.Equal(got, respBody) || res.Header.Get("X-A") != "1" || res.Trailer.Get("X-Trailer") != "end" {
			t.Errorf("response: %d bytes, header %v, trailer %v", len(got), res.Header, res.Trailer)
		}
		if useTLS != (res.TLS != nil) {
			t.Errorf("TLS state %v", res.TLS)
		}
		r := waitRequests(t, s, 1)[0]
		if !bytes.Equal(r.Body, reqBody) || !r.EndStream || r.Method != "POST" || r.Path != "/big" || r.Header.Get("X-Custom") != "yes" {
			t.Errorf("record: %d body bytes, end %v, %s %s, %v", len(r.Body), r.EndStream, r.Method, r.Path, r.Header)
		}
		if c := s.Conns()[0]; c.BytesRead < int64(len(reqBody)) || c.BytesWritten < int64(len(respBody)) {
			t.Errorf("byte counts %+v", c)
		}
	})
}

func TestClientConnSeesEachAction(t *testing.T) {
	body := []byte("one request body")
	for _, tc := range []struct {
		name     string
		action   h2server.Action
		method   string
		timeout  time.Duration
		check    func(error) bool
		wantBody string // as recorded by the server
	}{
		{"refuse-on-headers", h2server.Refuse(), "POST", 0, streamCode(http2.ErrCodeRefusedStream), ""},
		{"refuse-after-body", h2server.RefuseAfterBody(), "POST", 0, streamCode(http2.ErrCodeRefusedStream), string(body)},
		{"reset-internal", h2server.Reset(http2.ErrCodeInternal), "POST", 0, streamCode(http2.ErrCodeInternal), string(body)},
		{"reset-protocol", h2server.Reset(http2.ErrCodeProtocol), "POST", 0, streamCode(http2.ErrCodeProtocol), string(body)},
		{"goaway-at-then-close", h2server.GoAwayAt().WithAt(h2server.AfterBody).WithClose(h2server.CloseFIN), "POST", 0, goAwayLast(1), string(body)},
		{"close-fin", h2server.CloseConn(), "GET", 0, readErr(io.EOF), ""},
		// Linux reports a peer's RST once: to the reader, or to the
		// writer if it meets it first (the reader then reads EOF).
		{"close-rst-after-body", h2server.CloseConnAfterBody().WithClose(h2server.CloseRST), "POST", 0, either(isReset, readErr(io.EOF)), string(body)},
		{"partial-headers", h2server.PartialHeaders(), "GET", 0, readErr(io.EOF), ""},
		{"hang", h2server.Hang(0), "POST", 200 * time.Millisecond, is(context.DeadlineExceeded), string(body)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, one(tc.action))
			cc := clientConn(t, s)
			ctx := ctxT(t)
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			var b []byte
			if tc.method == "POST" {
				b = body
			}
			res, err := cc.RoundTrip(request(t, ctx, s, tc.method, "/"+tc.name, b))
			if err == nil {
				res.Body.Close()
				t.Fatalf("RoundTrip succeeded with %s", res.Status)
			}
			if !tc.check(err) {
				t.Errorf("RoundTrip error %T %v", err, err)
			}
			r := waitRequests(t, s, 1)[0]
			if string(r.Body) != tc.wantBody || r.Action != tc.action.Kind || r.StreamID != 1 {
				t.Errorf("record: body %q action %v stream %d", r.Body, r.Action, r.StreamID)
			}
			if s.Count() != 1 {
				t.Errorf("server saw %d streams, want 1", s.Count())
			}
		})
	}
}

// TestClientConnGoAwayBelowItsStream shows the GOAWAY boundary as a client
// sees it: the stream above the last stream ID ends with a GoAwayError
// that proves it unprocessed, and the connection takes no new stream.
func TestClientConnGoAwayBelowItsStream(t *testing.T) {
	s := start(t, one(h2server.OK("first"), h2server.GoAwayBelow()))
	cc := clientConn(t, s)
	res, err := cc.RoundTrip(request(t, ctxT(t), s, "GET", "/1", nil))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	res, err = cc.RoundTrip(request(t, ctxT(t), s, "POST", "/3", []byte("x")))
	if err == nil {
		res.Body.Close()
		t.Fatal("second request succeeded")
	}
	var ge *h2.GoAwayError
	if !errors.As(err, &ge) || !ge.Unprocessed() || ge.LastStreamID != 1 || ge.StreamID != 3 {
		t.Errorf("error %T %v, want a GoAwayError proving stream 3 unprocessed", err, err)
	}
	rs := waitRequests(t, s, 2)
	if rs[1].StreamID != 3 || rs[1].Seq != 1 || rs[1].Action != replaysafetest.StreamGoAway {
		t.Errorf("record %+v", rs[1])
	}
	if c := s.Conns()[0]; !c.GoAwaySent || c.GoAwayLast != 1 {
		t.Errorf("conn %+v", c)
	}
	if cc.cc.Reserve() {
		t.Error("the ClientConn still takes requests after a GOAWAY")
	}
}

func TestClientConnConnectionIndicesAndSettings(t *testing.T) {
	cfg := h2server.Config{
		MaxConcurrentStreams: 3,
		Conns:                []h2server.ConnScript{{Streams: []h2server.Action{h2server.Refuse()}}},
		Default:              h2server.Every(h2server.OK("fine")),
	}
	s := start(t, cfg)
	first := clientConn(t, s)
	if _, err := first.RoundTrip(request(t, ctxT(t), s, "GET", "/a", nil)); !streamCode(http2.ErrCodeRefusedStream)(err) {
		t.Fatalf("conn 0: %v", err)
	}
	if st := first.cc.State(); st.MaxConcurrentStreams != 3 {
		t.Errorf("advertised MaxConcurrentStreams: %d", st.MaxConcurrentStreams)
	}
	for i := range 2 {
		second := clientConn(t, s)
		res, err := second.RoundTrip(request(t, ctxT(t), s, "GET", "/b", nil))
		if err != nil {
			t.Fatalf("conn %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != "fine" {
			t.Errorf("body %q", b)
		}
	}
	rs := waitRequests(t, s, 3)
	for i, r := range rs {
		if r.Conn != i || r.StreamID != 1 || r.Seq != 0 {
			t.Errorf("record %d: conn %d stream %d seq %d", i, r.Conn, r.StreamID, r.Seq)
		}
	}
	if len(s.RequestsOn(2)) != 1 || rs[0].Authority != s.Addr() {
		t.Errorf("RequestsOn(2) %v, authority %q", s.RequestsOn(2), rs[0].Authority)
	}
}
