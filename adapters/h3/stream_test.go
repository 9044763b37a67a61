package h3_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/adapters/h3"
	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// sent is what one request over one path showed: the events its Attempt
// emitted, what it knew of its stream, how it ended, and what the server
// received.
type sent struct {
	Events     []fsm.EventKind
	Stream     uint64
	HaveStream bool
	Wrote      bool
	UploadDone bool
	UploadErr  bool
	Status     int
	Body       string
	Failure    fsm.Event
	Bound      bool // InformationalError said why
	Received   []string
	Caller     map[string]int // the caller's own httptrace hooks, by calls
}

// watched is one connection to a scripted server, followed by a Watch.
type watched struct {
	srv   *h3server.Server
	ctx   context.Context // ends within 20 s
	w     *h3.Watch
	qc    *quic.Conn
	cc    *http3.ClientConn
	state *tls.ConnectionState
}

// dialWatched starts a server that answers every request stream with
// action and opens one watched connection to it; both close when the
// test ends.
func dialWatched(t *testing.T, action h3server.Action) *watched {
	t.Helper()
	srv, err := h3server.New(h3server.Config{Default: h3server.Every(action)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	w := h3.NewWatch()
	qc, err := srv.Dial(ctx, &quic.Config{Tracer: w.Tracer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	state := qc.ConnectionState().TLS
	return &watched{srv: srv, ctx: ctx, w: w, qc: qc, cc: (&http3.Transport{}).NewClientConn(qc), state: &state}
}

// sendOne sends GET /path to a new server that answers with action,
// through quic-go's ClientConn.RoundTrip (own false) or
// Attempt.RoundTrip (own true), and returns what it showed.
func sendOne(t *testing.T, action h3server.Action, own bool, path string) sent {
	t.Helper()
	c := dialWatched(t, action)
	srv, ctx, w, cc := c.srv, c.ctx, c.w, c.cc
	s := sent{Caller: map[string]int{}}
	var mu sync.Mutex
	called := func(hook string) {
		mu.Lock()
		s.Caller[hook]++
		mu.Unlock()
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaderField:     func(string, []string) { called("WroteHeaderField") },
		WroteHeaders:         func() { called("WroteHeaders") },
		WroteRequest:         func(httptrace.WroteRequestInfo) { called("WroteRequest") },
		GotFirstResponseByte: func() { called("GotFirstResponseByte") },
		Got1xxResponse:       func(int, textproto.MIMEHeader) error { called("Got1xxResponse"); return nil },
		Got100Continue:       func() { called("Got100Continue") },
	})
	emit := h3.EmitFunc(func(e fsm.Event) {
		mu.Lock()
		s.Events = append(s.Events, e.Kind)
		mu.Unlock()
	})
	att := w.NewAttempt()
	var res *http.Response
	var err error
	if own {
		rctx := httptrace.WithClientTrace(ctx, att.StreamTrace(emit, nil))
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, srv.URL()+path, nil)
		res, err = att.RoundTrip(cc, c.state, req)
	} else {
		rctx := httptrace.WithClientTrace(ctx, att.Trace(emit, nil))
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, srv.URL()+path, nil)
		res, err = cc.RoundTrip(req)
	}
	if err == nil {
		b, rerr := io.ReadAll(res.Body)
		res.Body.Close()
		s.Status, s.Body = res.StatusCode, string(b)
		if rerr != nil {
			err = rerr
		} else if res.Request == nil || res.TLS == nil || res.TLS.NegotiatedProtocol != http3.NextProtoH3 {
			t.Errorf("own=%v: response without its request or TLS state", own)
		}
	}
	s.Failure = att.Failure(ctx, err)
	s.Bound = att.InformationalError() != nil
	s.Stream, s.HaveStream = att.Stream()
	s.Wrote = att.Wrote()
	var uerr error
	s.UploadDone, uerr = att.Upload()
	s.UploadErr = uerr != nil
	att.Done()
	rs, werr := srv.WaitRequests(ctx, 1)
	if werr != nil {
		t.Fatalf("own=%v: the server saw no request: %v", own, werr)
	}
	for _, r := range rs {
		fields := slices.Clone(r.Fields)
		for i := range fields {
			if fields[i].Name == ":authority" {
				fields[i].Value = "the server" // each server has its own port
			}
		}
		s.Received = append(s.Received, fmt.Sprintf("stream %d %s %s %v", r.Stream, r.Method, r.Path, fields))
	}
	return s
}

// A request without a body sent on the Attempt's own stream shows what
// the same request sent by quic-go's ClientConn.RoundTrip shows, in every
// way a server can end it: the same events, stream, failure event and
// decision, the same calls of the caller's own httptrace hooks, and the
// same one request, field for field, at the server.
func TestOwnStreamMatchesClientConn(t *testing.T) {
	link := http.Header{"Link": {"</a.css>; rel=preload"}}
	for _, tc := range []struct {
		name   string
		action h3server.Action
	}{
		{"answered", h3server.OK("hello")},
		{"103 then answered", h3server.OK("hello").WithInformational(http.StatusEarlyHints, link)},
		{"100 then answered", h3server.OK("hello").WithInformational(http.StatusContinue, nil)},
		{"rejected", h3server.Reject()},
		{"reset", h3server.Reset(http3.ErrCodeInternalError)},
		{"goaway then rejected", h3server.GoAwayRejecting()},
		{"goaway then closed", h3server.GoAwayRejecting().WithClose()},
		{"connection closed", h3server.CloseConn()},
		{"endless 103", h3server.Endless1xx(http.StatusEarlyHints)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]sent
			for i, own := range []bool{false, true} {
				got[i] = sendOne(t, tc.action, own, "/order")
			}
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Errorf("ClientConn.RoundTrip showed\n%+v\nAttempt.RoundTrip showed\n%+v", got[0], got[1])
			}
			if n := len(got[1].Received); n != 1 {
				t.Errorf("server received %d requests, want 1", n)
			}
			if got[1].Failure.Kind == fsm.EventInvalid {
				t.Logf("events %v, caller hooks %v, answered %d", got[1].Events, got[1].Caller, got[1].Status)
				return
			}
			m := fsm.New(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, 0)
			m.Step(fsm.Event{Kind: fsm.EventConnAcquired, Proto: fsm.ProtoH3})
			for _, k := range got[1].Events {
				m.Step(fsm.Event{Kind: k})
			}
			t.Logf("events %v, caller hooks %v, failure %v, decision on it %v", got[1].Events, got[1].Caller, got[1].Failure, m.Step(got[1].Failure))
		})
	}
}

// On a connection that is gone no stream opens: nothing of the request
// is sent, the Attempt knows no stream, and Failure hands the request
// back. The server received the first request only.
func TestOwnStreamNoStream(t *testing.T) {
	c := dialWatched(t, h3server.OK("ok"))
	srv, ctx, w, cc, qc := c.srv, c.ctx, c.w, c.cc, c.qc
	send := func() (*h3.Attempt, *http.Response, error) {
		att := w.NewAttempt()
		rctx := httptrace.WithClientTrace(ctx, att.StreamTrace(nil, nil))
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, srv.URL()+"/", nil)
		res, err := att.RoundTrip(cc, c.state, req)
		return att, res, err
	}
	first, res, err := send()
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	first.Done()
	qc.CloseWithError(0, "")
	second, _, err := send()
	if err == nil {
		t.Fatal("a request went out on a closed connection")
	}
	if ev := second.Failure(ctx, err); ev.Kind != fsm.EventHandedBack {
		t.Errorf("Failure = %v (%v), want handed-back", ev, err)
	}
	if _, ok := second.Stream(); ok || second.Wrote() {
		t.Error("the request has a stream, or wrote")
	}
	second.Done()
	if n := srv.Count(); n != 1 {
		t.Errorf("server received %d requests, want 1", n)
	}
}

// A canceled context cancels the stream (H3_REQUEST_CANCELLED, as quic-go
// does): the request waiting for a response the server holds for 5 s
// fails at once with the context's error, which Failure reads as a
// cancellation.
func TestOwnStreamCanceled(t *testing.T) {
	c := dialWatched(t, h3server.Hang(5*time.Second))
	srv, ctx, w, cc := c.srv, c.ctx, c.w, c.cc
	rctx, stop := context.WithCancel(ctx)
	att := w.NewAttempt()
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(rctx, att.StreamTrace(nil, nil)), http.MethodGet, srv.URL()+"/", nil)
	go func() {
		srv.WaitCount(ctx, 1)
		stop()
	}()
	_, err := att.RoundTrip(cc, c.state, req)
	if !errors.Is(err, context.Canceled) { // not the server's answer after 5 s
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if ev := att.Failure(rctx, err); ev.Kind != fsm.EventCanceled {
		t.Errorf("Failure = %v, want canceled", ev)
	}
	att.Done()
	if n := srv.Count(); n != 1 {
		t.Errorf("server received %d requests, want 1", n)
	}
}

// A Limit below quic-go's cap holds a request on its own stream (quic-go
// ignores the hook's verdict): the second 103 over a limit of one resets
// the stream and fails the request with the Limit's error. The caller's
// own hook sees the first 103 only.
func TestOwnStreamInformationalLimit(t *testing.T) {
	c := dialWatched(t, h3server.Endless1xx(http.StatusEarlyHints))
	srv, ctx, w, cc := c.srv, c.ctx, c.w, c.cc
	att := w.NewAttempt()
	att.SetInformationalLimit(informational.Limit{Count: 1})
	var seen int
	caller := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error { seen++; return nil },
	})
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(caller, att.StreamTrace(nil, nil)), http.MethodGet, srv.URL()+"/", nil)
	_, err := att.RoundTrip(cc, c.state, req)
	var le *informational.LimitError
	if !errors.As(err, &le) || le.Limit.Count != 1 || le.Count != 2 {
		t.Fatalf("err = %v, want the Limit's error at the second response", err)
	}
	if seen != 1 {
		t.Errorf("the caller's hook saw %d responses, want the 1 within the bound", seen)
	}
	if ev := att.Failure(ctx, err); ev.Kind != fsm.EventMalformed {
		t.Errorf("Failure = %v, want malformed", ev)
	}
	att.Done()
	if n := srv.Count(); n != 1 {
		t.Errorf("server received %d requests, want 1", n)
	}
}

// Requests sent both ways at once on one connection each learn their own
// stream: the Watch hands quic-go's HEADERS frames to the waiting
// ClientConn.RoundTrip requests only, never one of a stream an Attempt
// opened itself. Every request's stream is the one the server received
// its path on.
func TestOwnStreamBesideClientConn(t *testing.T) {
	const n = 40
	c := dialWatched(t, h3server.OK("ok"))
	srv, ctx, w, cc := c.srv, c.ctx, c.w, c.cc
	streams := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			att := w.NewAttempt()
			defer att.Done()
			url := srv.URL() + "/" + strconv.Itoa(i)
			var res *http.Response
			var err error
			if i%2 == 0 {
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, att.Trace(nil, nil)), http.MethodPost, url, strings.NewReader("body"))
				res, err = cc.RoundTrip(req)
			} else {
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, att.StreamTrace(nil, nil)), http.MethodGet, url, nil)
				res, err = att.RoundTrip(cc, c.state, req)
			}
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			id, ok := att.Stream()
			if !ok {
				t.Errorf("request %d learned no stream", i)
			}
			streams[i] = id
		})
	}
	wg.Wait()
	rs, err := srv.WaitRequests(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != n {
		t.Fatalf("server received %d requests, want %d", len(rs), n)
	}
	for _, r := range rs {
		i, err := strconv.Atoi(strings.TrimPrefix(r.Path, "/"))
		if err != nil || i < 0 || i >= n {
			t.Fatalf("server received path %q", r.Path)
		}
		if streams[i] != r.Stream {
			t.Errorf("request %d (%s) claimed stream %d, the server received it on %d", i, r.Method, streams[i], r.Stream)
		}
	}
}

// OwnStream takes the requests whose whole message is their header
// section, and leaves the rest to ClientConn.RoundTrip.
func TestOwnStream(t *testing.T) {
	withTrailer, _ := http.NewRequest(http.MethodGet, "https://x/", nil)
	withTrailer.Trailer = http.Header{"X-Sum": nil}
	for _, tc := range []struct {
		req  *http.Request
		want bool
	}{
		{newReq(http.MethodGet, nil), true},
		{newReq(http.MethodHead, nil), true},
		{newReq(http.MethodDelete, http.NoBody), true},
		{newReq(http.MethodPost, nil), true},
		{newReq(http.MethodPost, strings.NewReader("x")), false},
		{newReq(http.MethodConnect, nil), false},
		{newReq(http3.MethodGet0RTT, nil), false},
		{withTrailer, false},
	} {
		if got := h3.OwnStream(tc.req); got != tc.want {
			t.Errorf("OwnStream(%s, body %v, trailer %v) = %v", tc.req.Method, tc.req.Body != nil, tc.req.Trailer, got)
		}
	}
}

func newReq(method string, body io.Reader) *http.Request {
	r, err := http.NewRequest(method, "https://x/", body)
	if err != nil {
		panic(err)
	}
	return r
}
