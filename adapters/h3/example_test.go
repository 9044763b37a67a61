package h3_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/adapters/h3"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

func ExampleClassify() {
	for _, err := range []error{
		&quic.StreamError{StreamID: 4, ErrorCode: quic.StreamErrorCode(http3.ErrCodeRequestRejected), Remote: true},
		&quic.StreamError{StreamID: 4, ErrorCode: quic.StreamErrorCode(http3.ErrCodeInternalError), Remote: true},
		&quic.ApplicationError{Remote: true},
		&quic.IdleTimeoutError{},
		errors.New("http3: conn unusable: connection in graceful shutdown"),
	} {
		fmt.Println(h3.Classify(err))
	}
	// Output:
	// @0s request-rejected
	// @0s reset
	// @0s closed
	// @0s timeout
	// @0s closed
}

// A Watch on one connection, an Attempt per request: the server sends a
// GOAWAY carrying the request's own stream ID and closes the connection,
// which quic-go reports as a plain connection close. The Attempt recovers
// the boundary, and fsm decides the request was not processed (RS14).
func ExampleAttempt_Failure() {
	srv, err := h3server.New(h3server.Config{Conns: []h3server.ConnScript{
		{Streams: []h3server.Action{h3server.GoAwayRejecting().WithClose()}},
	}})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	w := h3.NewWatch()
	qc, err := srv.Dial(context.Background(), &quic.Config{Tracer: w.Tracer})
	if err != nil {
		panic(err)
	}
	cc := (&http3.Transport{}).NewClientConn(qc)

	m := fsm.New(fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyNone}, fsm.Limits{}, 0)
	m.Step(fsm.Event{Kind: fsm.EventConnAcquired, Proto: fsm.ProtoH3})
	att := w.NewAttempt()
	emit := func(e fsm.Event) { m.Step(e) }
	ctx := httptrace.WithClientTrace(context.Background(), att.Trace(h3.EmitFunc(emit), nil))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/order", nil)
	_, err = cc.RoundTrip(req)
	ev := att.Failure(ctx, err)
	fmt.Println(ev)
	fmt.Println(m.Step(ev))
	// Output:
	// @0s h3-goaway boundary=0 stream=0
	// resend evidence-goaway-boundary conn=discard
}

// A GET on a stream the Attempt opens itself: its stream ID is known
// before the request is sent, and the events are those ClientConn.RoundTrip
// reports for it.
func ExampleAttempt_RoundTrip() {
	srv, err := h3server.New(h3server.Config{Default: h3server.Every(h3server.OK("hello"))})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	w := h3.NewWatch()
	qc, err := srv.Dial(context.Background(), &quic.Config{Tracer: w.Tracer})
	if err != nil {
		panic(err)
	}
	defer qc.CloseWithError(0, "")
	cc := (&http3.Transport{}).NewClientConn(qc)
	state := qc.ConnectionState().TLS

	att := w.NewAttempt()
	defer att.Done()
	emit := func(e fsm.Event) { fmt.Println(e.Kind) }
	ctx := httptrace.WithClientTrace(context.Background(), att.StreamTrace(h3.EmitFunc(emit), nil))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL()+"/greeting", nil)
	fmt.Println(h3.OwnStream(req))
	res, err := att.RoundTrip(cc, &state, req)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	id, _ := att.Stream()
	fmt.Println(res.StatusCode, string(body), "stream", id)
	// Output:
	// true
	// first-byte-written
	// request-written
	// first-response-byte
	// 200 hello stream 0
}
