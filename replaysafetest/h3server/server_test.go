package h3server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kittest"
)

// start runs a server for the test and closes it at the end.
var start = kittest.Starter(h3server.New, func(c *h3server.Config) *func(string, ...any) { return &c.Logf })

// clientConn dials the server and wraps the QUIC connection in quic-go's
// HTTP/3 ClientConn, used directly so that no Transport retry loop runs.
// The connection is closed at the end of the test.
func clientConn(t *testing.T, s *h3server.Server) *http3.ClientConn {
	t.Helper()
	return clientConnWith(t, s, nil)
}

// one scripts the first connection's streams.
func one(actions ...h3server.Action) h3server.Config {
	return h3server.Config{Conns: []h3server.ConnScript{{Streams: actions}}}
}

// ctxT is a context bound by the test and the kit's wait bound.
var ctxT = kittest.Context

func clientConnWith(t *testing.T, s *h3server.Server, conf *quic.Config) *http3.ClientConn {
	t.Helper()
	qc, err := s.Dial(ctxT(t), conf)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	return (&http3.Transport{}).NewClientConn(qc)
}

func request(t *testing.T, ctx context.Context, s *h3server.Server, method, path string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// roundTrip sends req on cc and reads the whole response.
func roundTrip(t *testing.T, cc *http3.ClientConn, req *http.Request) (*http.Response, []byte, error) {
	t.Helper()
	res, err := cc.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, b, err
}

// failOnce starts a server with cfg and sends it one request, which
// must fail with code; it returns the server and the client connection.
func failOnce(t *testing.T, cfg h3server.Config, method, path string, body io.Reader, code http3.ErrCode) (*h3server.Server, *http3.ClientConn) {
	t.Helper()
	s := start(t, cfg)
	cc := clientConn(t, s)
	_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, method, path, body))
	wantH3Error(t, err, code)
	t.Logf("client error: %T %q", err, err)
	return s, cc
}

func waitRequests(t *testing.T, s *h3server.Server, n int) []h3server.Received {
	t.Helper()
	rs, err := s.WaitRequests(ctxT(t), n)
	if err != nil {
		t.Fatalf("WaitRequests(%d): %v (have %d)", n, err, s.Count())
	}
	return rs
}

// h3Error returns the HTTP/3 error err carries, if any.
func h3Error(err error) (*http3.Error, bool) {
	return errors.AsType[*http3.Error](err)
}

// wantH3Error fails unless err carries an HTTP/3 error with code, from the
// server.
func wantH3Error(t *testing.T, err error, code http3.ErrCode) {
	t.Helper()
	he, ok := h3Error(err)
	if !ok || he.ErrorCode != code || !he.Remote {
		t.Fatalf("error %T %q, want an *http3.Error %v from the server", err, err, code)
	}
}

// trailingBody reads r and, at its end, fills the request's declared
// trailers, as a client computing a checksum would.
type trailingBody struct {
	r     io.Reader
	onEOF func()
}

func (b *trailingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF && b.onEOF != nil {
		b.onEOF()
		b.onEOF = nil
	}
	return n, err
}

// pipeBody is a request body the test writes while the request is in
// flight. Its writer is closed at the end of the test so that quic-go's
// upload goroutine returns.
func pipeBody(t *testing.T) (*io.PipeReader, *io.PipeWriter) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.CloseWithError(errors.New("test over")) })
	return pr, pw
}

// writeUntilError writes chunks to w until a write fails, at most n times.
func writeUntilError(w io.Writer, chunk []byte, n int) error {
	for range n {
		if _, err := w.Write(chunk); err != nil {
			return err
		}
	}
	return nil
}

// waitDone waits for the client connection to end.
func waitDone(t *testing.T, cc *http3.ClientConn) {
	t.Helper()
	select {
	case <-cc.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the client connection is still open")
	}
}

func TestRespondRecordsEverything(t *testing.T) {
	reqBody := bytes.Repeat([]byte("request-"), 40_000) // 320 000 bytes, many QUIC packets
	respBody := bytes.Repeat([]byte("response"), 25_000)
	a := h3server.Respond(201, http.Header{"X-Answer": {"42"}}, respBody).
		WithTrailer(http.Header{"X-Checksum": {"abc"}}).
		WithInformational(103, http.Header{"Link": {"</style.css>; rel=preload"}})
	s := start(t, one(a))
	cc := clientConn(t, s)

	var interim []string
	ctx := httptrace.WithClientTrace(ctxT(t), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			interim = append(interim, http.StatusText(code)+" "+h.Get("Link"))
			return nil
		},
	})
	req := request(t, ctx, s, "POST", "/upload?x=1", nil)
	req.Body = io.NopCloser(&trailingBody{r: bytes.NewReader(reqBody), onEOF: func() {
		req.Trailer.Set("X-Req-Checksum", "sum")
	}})
	req.ContentLength = int64(len(reqBody))
	req.Trailer = http.Header{"X-Req-Checksum": nil}
	req.Header.Set("X-Custom", "yes")
	res, got, err := roundTrip(t, cc, req)
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	if res.StatusCode != 201 || res.Header.Get("X-Answer") != "42" || res.ContentLength != int64(len(respBody)) {
		t.Errorf("response %s, header %v, length %d", res.Status, res.Header, res.ContentLength)
	}
	if !bytes.Equal(got, respBody) || res.Trailer.Get("X-Checksum") != "abc" {
		t.Errorf("response body %d bytes, trailer %v", len(got), res.Trailer)
	}
	if len(interim) != 1 || interim[0] != "Early Hints </style.css>; rel=preload" {
		t.Errorf("informational responses %q", interim)
	}

	rs := waitRequests(t, s, 1)
	if len(rs) != 1 {
		t.Fatalf("%d records, want 1", len(rs))
	}
	r := rs[0]
	if r.Conn != 0 || r.Seq != 0 || r.Stream != 0 || r.Method != "POST" || r.Path != "/upload?x=1" ||
		r.Scheme != "https" || r.Authority != s.Addr() || r.Action != replaysafetest.StreamRespond {
		t.Errorf("record: conn %d seq %d stream %d %s %s://%s%s %v", r.Conn, r.Seq, r.Stream, r.Method, r.Scheme, r.Authority, r.Path, r.Action)
	}
	if !bytes.Equal(r.Body, reqBody) || r.BodyDropped != 0 || !r.FIN || !r.Done || r.FINAt.Before(r.At) {
		t.Errorf("body %d bytes (dropped %d), FIN %v at %v after %v, done %v", len(r.Body), r.BodyDropped, r.FIN, r.FINAt, r.At, r.Done)
	}
	if r.Header.Get("X-Custom") != "yes" || r.Trailer.Get("X-Req-Checksum") != "sum" || len(r.Trailer) != 1 {
		t.Errorf("header %v, trailer %v", r.Header, r.Trailer)
	}
	if len(r.Fields) < 5 || !r.Fields[0].IsPseudo() || r.Fields[len(r.Fields)-1].IsPseudo() {
		t.Errorf("fields %v", r.Fields)
	}
	if r.ClientReset || r.ServerReset || r.Ignored || r.Err != "" {
		t.Errorf("record %+v", r)
	}
	eventually(t, "the client SETTINGS recorded", func() bool { return s.Conns()[0].SettingsReceived })
	c := s.Conns()[0]
	if c.NegotiatedProtocol != "h3" || c.Streams != 1 || c.Closed || c.GoAwaySent {
		t.Errorf("conn %+v", c)
	}
	if c.BytesSent < uint64(len(respBody)) || c.BytesReceived < uint64(len(reqBody)) {
		t.Errorf("byte counts: sent %d, received %d", c.BytesSent, c.BytesReceived)
	}
}

func TestRejectOnHeadersSkipsTheBody(t *testing.T) {
	s, cc := failOnce(t, one(h3server.Reject(), h3server.OK("second")), "POST", "/a", bytes.NewReader(make([]byte, 100_000)), http3.ErrCodeRequestRejected)

	// The connection goes on: the rejection was the stream's alone.
	res, got, err := roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/b", nil))
	if err != nil || res.StatusCode != 200 || string(got) != "second" {
		t.Fatalf("second request: %v %q", err, got)
	}
	rs := waitRequests(t, s, 2)
	if len(rs) != 2 {
		t.Fatalf("%d records", len(rs))
	}
	if r := rs[0]; r.Stream != 0 || r.Action != replaysafetest.StreamRefuse || !r.ServerReset ||
		r.ServerResetCode != http3.ErrCodeRequestRejected || len(r.Body) != 0 || r.FIN || !r.Done {
		t.Errorf("rejected record: %+v", r)
	}
	if r := rs[1]; r.Stream != 4 || r.Seq != 1 || r.Action != replaysafetest.StreamRespond || !r.FIN {
		t.Errorf("second record: %+v", r)
	}
}

func TestResetAfterTheWholeRequest(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 5_000)
	for _, tc := range []struct {
		action h3server.Action
		code   http3.ErrCode
	}{
		{h3server.RejectAfterBody(), http3.ErrCodeRequestRejected},
		{h3server.Reset(http3.ErrCodeInternalError), http3.ErrCodeInternalError},
		{h3server.Reset(http3.ErrCodeRequestCanceled), http3.ErrCodeRequestCanceled},
		{h3server.Reset(0), http3.ErrCodeNoError},
	} {
		t.Run(tc.action.String(), func(t *testing.T) {
			s, _ := failOnce(t, one(tc.action), "PUT", "/x", bytes.NewReader(body), tc.code)
			r := waitRequests(t, s, 1)[0]
			if !bytes.Equal(r.Body, body) || !r.FIN || !r.ServerReset || r.ServerResetCode != tc.code {
				t.Errorf("record: %d body bytes, FIN %v, reset %v %v", len(r.Body), r.FIN, r.ServerReset, r.ServerResetCode)
			}
		})
	}
}

func TestInformationalBeforeAReset(t *testing.T) {
	s := start(t, one(h3server.Reset(http3.ErrCodeInternalError).WithInformational(100, nil)))
	cc := clientConn(t, s)
	got1xx := make(chan int, 1)
	ctx := httptrace.WithClientTrace(ctxT(t), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			got1xx <- code
			return nil
		},
	})
	pr, pw := pipeBody(t)
	done := make(chan error, 1)
	go func() {
		_, _, err := roundTrip(t, cc, request(t, ctx, s, "POST", "/", pr))
		done <- err
	}()
	// RESET_STREAM discards what the client has not read yet, so the body
	// (and with it the reset) waits until the 100 has been read.
	if code := <-got1xx; code != 100 {
		t.Errorf("informational %d, want 100", code)
	}
	if _, err := pw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	wantH3Error(t, <-done, http3.ErrCodeInternalError)
}

func TestCloseConnCrossesTheRequest(t *testing.T) {
	body := []byte("uploaded before the close")
	for _, tc := range []struct {
		action   h3server.Action
		code     http3.ErrCode
		wantBody string
	}{
		{h3server.CloseConn(), http3.ErrCodeNoError, ""},
		{h3server.CloseConnAfterBody(), http3.ErrCodeNoError, string(body)},
		{h3server.CloseConnAfterBody().WithCode(http3.ErrCodeExcessiveLoad), http3.ErrCodeExcessiveLoad, string(body)},
	} {
		t.Run(tc.action.String(), func(t *testing.T) {
			s, cc := failOnce(t, one(tc.action), "POST", "/", bytes.NewReader(body), tc.code)
			// The connection is gone: the next request cannot open a stream.
			_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/", nil))
			wantH3Error(t, err, tc.code)
			t.Logf("client error for the next request: %T %q", err, err)

			r := waitRequests(t, s, 1)[0]
			if string(r.Body) != tc.wantBody || r.FIN != (tc.wantBody != "") || r.Action != replaysafetest.StreamClose {
				t.Errorf("record: body %q FIN %v action %v", r.Body, r.FIN, r.Action)
			}
			if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
				t.Fatal(err)
			}
			if c := s.Conns()[0]; c.ClosedByClient || c.CloseCode != tc.code || s.Count() != 1 {
				t.Errorf("conn %+v, %d records", c, s.Count())
			}
		})
	}
}

func TestGoAway(t *testing.T) {
	t.Run("rejecting-keeps-the-connection-open", func(t *testing.T) {
		s := start(t, one(h3server.OK("one"), h3server.GoAwayRejecting()))
		cc := clientConn(t, s)
		if _, got, err := roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/1", nil)); err != nil || string(got) != "one" {
			t.Fatalf("first request: %v %q", err, got)
		}
		_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "POST", "/2", strings.NewReader("body")))
		wantH3Error(t, err, http3.ErrCodeRequestRejected)
		// quic-go's client closes a connection that got a GOAWAY once it
		// has no request left, and opens no stream after a GOAWAY.
		waitDone(t, cc)
		_, _, err = roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/3", nil))
		if err == nil || !strings.Contains(err.Error(), "connection in graceful shutdown") {
			t.Fatalf("request after the GOAWAY: %v", err)
		}
		t.Logf("client error for a request after the GOAWAY: %T %q", err, err)
		if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
			t.Fatal(err)
		}
		rs := waitRequests(t, s, 2)
		if len(rs) != 2 || rs[1].Stream != 4 || !rs[1].ServerReset || rs[1].ServerResetCode != http3.ErrCodeRequestRejected || len(rs[1].Body) != 0 {
			t.Errorf("records %+v", rs)
		}
		if c := s.Conns()[0]; !c.GoAwaySent || c.GoAwayID != 4 || !c.ClosedByClient || c.CloseCode != http3.ErrCodeNoError {
			t.Errorf("conn %+v", c)
		}
	})

	t.Run("after-answers-this-stream", func(t *testing.T) {
		a := h3server.GoAwayAfter().WithResponse(200, []byte("still answered"))
		s := start(t, one(a))
		cc := clientConn(t, s)
		pr, pw := pipeBody(t)
		type result struct {
			body []byte
			err  error
		}
		done := make(chan result, 1)
		go func() {
			_, got, err := roundTrip(t, cc, request(t, ctxT(t), s, "POST", "/0", pr))
			done <- result{got, err}
		}()
		if err := s.WaitCount(ctxT(t), 1); err != nil {
			t.Fatal(err)
		}
		// The GOAWAY (carrying 4) is out; stream 0 is answered once its
		// request is complete.
		if _, err := pw.Write([]byte("late ")); err != nil {
			t.Fatal(err)
		}
		if _, err := pw.Write([]byte("upload")); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		res := <-done
		if res.err != nil || string(res.body) != "still answered" {
			t.Fatalf("stream 0: %v %q", res.err, res.body)
		}
		waitDone(t, cc)
		r := waitRequests(t, s, 1)[0]
		if string(r.Body) != "late upload" || !r.FIN || r.ServerReset {
			t.Errorf("record %+v", r)
		}
		if c := s.Conns()[0]; c.GoAwayID != 4 {
			t.Errorf("GOAWAY %d, want 4", c.GoAwayID)
		}
	})

	t.Run("in-flight-streams-below-are-answered-at-or-above-rejected", func(t *testing.T) {
		for _, tc := range []struct {
			name        string
			goAway      h3server.Action
			firstPasses bool
		}{
			{"rejecting-from-stream-4", h3server.GoAwayRejecting(), true},
			{"id-0-from-stream-4", h3server.GoAway(0), false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := start(t, one(h3server.OK("below"), tc.goAway))
				cc := clientConn(t, s)
				pr, pw := pipeBody(t)
				done := make(chan error, 1)
				go func() {
					_, got, err := roundTrip(t, cc, request(t, ctxT(t), s, "POST", "/0", pr))
					if err == nil && string(got) != "below" {
						err = errors.New("body " + string(got))
					}
					done <- err
				}()
				if err := s.WaitCount(ctxT(t), 1); err != nil {
					t.Fatal(err)
				}
				_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/4", nil))
				wantH3Error(t, err, http3.ErrCodeRequestRejected)
				if tc.firstPasses {
					if _, err := pw.Write([]byte("rest")); err != nil {
						t.Fatal(err)
					}
					pw.Close()
					if err := <-done; err != nil {
						t.Fatalf("stream 0: %v", err)
					}
				} else {
					wantH3Error(t, <-done, http3.ErrCodeRequestRejected)
				}
				rs := waitRequests(t, s, 2)
				if r := rs[0]; r.Stream != 0 || r.ServerReset == tc.firstPasses || r.FIN != tc.firstPasses {
					t.Errorf("stream 0 record %+v", r)
				}
				if r := rs[1]; r.Stream != 4 || !r.ServerReset || r.ServerResetCode != http3.ErrCodeRequestRejected {
					t.Errorf("stream 4 record %+v", r)
				}
			})
		}
	})

	t.Run("drop-never-answers", func(t *testing.T) {
		s := start(t, one(h3server.GoAwayRejecting().WithDrop()))
		cc := clientConn(t, s)
		ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
		defer cancel()
		_, _, err := roundTrip(t, cc, request(t, ctx, s, "POST", "/", strings.NewReader("dropped")))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want the request's own deadline", err)
		}
		waitDone(t, cc)
		r := waitRequests(t, s, 1)[0]
		if r.ServerReset || r.Action != replaysafetest.StreamGoAway || len(r.Body) != 0 || r.FIN {
			t.Errorf("record %+v", r)
		}
		if c := s.Conns()[0]; !c.GoAwaySent || c.GoAwayID != 0 {
			t.Errorf("conn %+v", c)
		}
	})

	t.Run("then-close", func(t *testing.T) {
		s := start(t, one(h3server.OK("one"), h3server.GoAwayRejecting().WithClose()))
		cc := clientConn(t, s)
		if _, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/1", nil)); err != nil {
			t.Fatal(err)
		}
		_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "POST", "/2", strings.NewReader("body")))
		wantH3Error(t, err, http3.ErrCodeNoError)
		t.Logf("client error for GOAWAY then close: %T %q", err, err)
		// The GOAWAY reached the client before the CONNECTION_CLOSE.
		_, _, err = roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/3", nil))
		if err == nil || !strings.Contains(err.Error(), "connection in graceful shutdown") {
			t.Fatalf("request after the GOAWAY: %v", err)
		}
		if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
			t.Fatal(err)
		}
		if c := s.Conns()[0]; c.GoAwayID != 4 || c.ClosedByClient || c.CloseCode != http3.ErrCodeNoError || s.Count() != 2 {
			t.Errorf("conn %+v, %d records", c, s.Count())
		}
	})
}

func TestEarlyResponseWhileTheUploadGoesOn(t *testing.T) {
	s := start(t, one(h3server.EarlyResponse(202, nil, []byte("early"))))
	cc := clientConn(t, s)
	pr, pw := pipeBody(t)
	req := request(t, ctxT(t), s, "POST", "/", nil)
	req.Body = io.NopCloser(&trailingBody{r: pr, onEOF: func() { req.Trailer.Set("X-Sum", "42") }})
	req.Trailer = http.Header{"X-Sum": nil}
	// Not one body byte has been written yet: the response comes first.
	res, got, err := roundTrip(t, cc, req)
	if err != nil || res.StatusCode != 202 || string(got) != "early" {
		t.Fatalf("response: %v %q", err, got)
	}
	parts := []string{"written ", "after ", "the response"}
	for _, p := range parts {
		if _, err := pw.Write([]byte(p)); err != nil {
			t.Fatalf("upload: %v", err)
		}
	}
	pw.Close()
	r := waitRequests(t, s, 1)[0]
	if string(r.Body) != strings.Join(parts, "") || !r.FIN || r.Trailer.Get("X-Sum") != "42" {
		t.Errorf("record: body %q FIN %v trailer %v", r.Body, r.FIN, r.Trailer)
	}
}

func TestStopSending(t *testing.T) {
	chunk := make([]byte, 1024)
	t.Run("early-response-then-stop", func(t *testing.T) {
		s := start(t, one(h3server.StopSending(0).WithResponse(200, []byte("enough"))))
		cc := clientConn(t, s)
		pr, pw := pipeBody(t)
		res, got, err := roundTrip(t, cc, request(t, ctxT(t), s, "POST", "/", pr))
		if err != nil || res.StatusCode != 200 || string(got) != "enough" {
			t.Fatalf("response: %v %q", err, got)
		}
		// quic-go's upload fails on the STOP_SENDING and closes the body.
		if err := writeUntilError(pw, chunk, 10_000); !errors.Is(err, io.ErrClosedPipe) {
			t.Fatalf("upload: %v, want the body closed", err)
		}
		r := waitRequests(t, s, 1)[0]
		if r.FIN || r.Action != replaysafetest.StreamStopSending || len(r.Body) != 0 || r.ServerReset {
			t.Errorf("record %+v", r)
		}
	})

	t.Run("request-stream-write-fails-with-the-code", func(t *testing.T) {
		s := start(t, one(h3server.StopSending(http3.ErrCodeRequestCanceled)))
		cc := clientConn(t, s)
		rs, err := cc.OpenRequestStream(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		defer rs.CancelRead(quic.StreamErrorCode(http3.ErrCodeNoError))
		if err := rs.SendRequestHeader(request(t, ctxT(t), s, "POST", "/", nil)); err != nil {
			t.Fatal(err)
		}
		res, err := rs.ReadResponse()
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("response: %v", err)
		}
		if err := rs.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		err = writeUntilError(rs, chunk, 10_000)
		wantH3Error(t, err, http3.ErrCodeRequestCanceled)
		t.Logf("RequestStream.Write error after STOP_SENDING: %T %q", err, err)
	})

	t.Run("without-response-then-hang", func(t *testing.T) {
		s := start(t, one(h3server.StopSending(0).WithoutResponse().WithDelay(200*time.Millisecond)))
		cc := clientConn(t, s)
		pr, pw := pipeBody(t)
		done := make(chan error, 1)
		began := time.Now()
		go func() {
			_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "POST", "/", pr))
			done <- err
		}()
		if err := writeUntilError(pw, chunk, 10_000); !errors.Is(err, io.ErrClosedPipe) {
			t.Fatalf("upload: %v, want the body closed", err)
		}
		err := <-done
		wantH3Error(t, err, http3.ErrCodeNoError)
		if d := time.Since(began); d < 200*time.Millisecond {
			t.Errorf("answered after %v, before the hang ended", d)
		}
	})
}

func TestStallReadBlocksTheUpload(t *testing.T) {
	const window, stall = 16 << 10, 400 * time.Millisecond
	cfg := one(h3server.StallRead(stall))
	cfg.StreamReceiveWindow = window
	s := start(t, cfg)
	cc := clientConn(t, s)
	body := bytes.Repeat([]byte("stalled-"), 32<<10) // 256 KiB, 16 windows
	pr, pw := pipeBody(t)
	wrote := make(chan time.Time, 1)
	go func() {
		for b := body; len(b) > 0; b = b[4096:] {
			if _, err := pw.Write(b[:4096]); err != nil {
				break
			}
		}
		pw.Close()
		wrote <- time.Now()
	}()
	done := make(chan error, 1)
	go func() {
		res, got, err := roundTrip(t, cc, request(t, ctxT(t), s, "PUT", "/", pr))
		if err == nil && res.StatusCode != 200 {
			err = errors.New(res.Status + " " + string(got))
		}
		done <- err
	}()
	if err := s.WaitCount(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	if r := s.Requests()[0]; len(r.Body) != 0 {
		t.Errorf("%d body bytes read during the stall", len(r.Body))
	}
	if err := <-done; err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	r := waitRequests(t, s, 1)[0]
	// Flow control held the upload back until the server read again.
	if d := (<-wrote).Sub(r.At); d < stall {
		t.Errorf("the upload finished %v after the HEADERS, within the %v stall", d, stall)
	}
	if !bytes.Equal(r.Body, body) || !r.FIN {
		t.Errorf("record: %d body bytes, FIN %v", len(r.Body), r.FIN)
	}
}

func TestHangThenClose(t *testing.T) {
	s := start(t, one(h3server.Hang(200*time.Millisecond)))
	cc := clientConn(t, s)
	began := time.Now()
	_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "POST", "/", strings.NewReader("still recorded")))
	wantH3Error(t, err, http3.ErrCodeNoError)
	if d := time.Since(began); d < 200*time.Millisecond {
		t.Errorf("closed after %v, before the hang ended", d)
	}
	if r := waitRequests(t, s, 1)[0]; string(r.Body) != "still recorded" || !r.FIN || r.Action != replaysafetest.StreamHang {
		t.Errorf("record %+v", r)
	}
}

func TestIdleRequestIsReset(t *testing.T) {
	cfg := one(h3server.OK("never"))
	cfg.IdleTimeout = 200 * time.Millisecond
	s := start(t, cfg)
	// Keep-alives keep the QUIC connection up: only the stream is idle.
	cc := clientConnWith(t, s, &quic.Config{KeepAlivePeriod: 50 * time.Millisecond})
	pr, _ := pipeBody(t) // never written
	_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "POST", "/", pr))
	wantH3Error(t, err, http3.ErrCodeRequestIncomplete)
	r := waitRequests(t, s, 1)[0]
	if r.Err != "idle timeout" || !r.ServerReset || r.FIN {
		t.Errorf("record %+v", r)
	}
	if s.Conns()[0].Closed {
		t.Error("the connection closed; only the stream should have")
	}
}

func TestEveryConnectionRejectsEverything(t *testing.T) {
	s := start(t, h3server.Config{Default: h3server.Every(h3server.Reject())})
	for conn := range 3 {
		cc := clientConn(t, s)
		for i := range 2 {
			_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/", nil))
			wantH3Error(t, err, http3.ErrCodeRequestRejected)
			_ = conn + i
		}
	}
	rs := waitRequests(t, s, 6)
	for i, r := range rs {
		if r.Conn != i/2 || r.Seq != i%2 || r.Stream != uint64(4*(i%2)) || r.Action != replaysafetest.StreamRefuse {
			t.Errorf("record %d: conn %d seq %d stream %d action %v", i, r.Conn, r.Seq, r.Stream, r.Action)
		}
	}
	if len(s.Conns()) != 3 || len(s.RequestsOn(2)) != 2 {
		t.Errorf("%d conns, %d requests on conn 2", len(s.Conns()), len(s.RequestsOn(2)))
	}
}

func TestMaxBodyBytes(t *testing.T) {
	cfg := one(h3server.OK("ok"))
	cfg.MaxBodyBytes = 10
	s := start(t, cfg)
	cc := clientConn(t, s)
	if _, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "POST", "/", strings.NewReader("0123456789abcdefghijklmno"))); err != nil {
		t.Fatal(err)
	}
	if r := waitRequests(t, s, 1)[0]; string(r.Body) != "0123456789" || r.BodyDropped != 15 || !r.FIN {
		t.Errorf("body %q, dropped %d", r.Body, r.BodyDropped)
	}
}

func TestCloseEndsHangingConnections(t *testing.T) {
	s, err := h3server.New(h3server.Config{Default: h3server.Every(h3server.Hang(0)), HangTimeout: time.Hour, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	cc := clientConn(t, s)
	done := make(chan error, 1)
	go func() {
		_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/", nil))
		done <- err
	}()
	if _, err := s.WaitRequests(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	kittest.Returns(t, "Close with a hanging connection", func() { s.Close() })
	wantH3Error(t, <-done, http3.ErrCodeNoError)
	if _, err := s.WaitRequests(ctxT(t), 2); !errors.Is(err, h3server.ErrClosed) {
		t.Errorf("wait after Close: %v, want ErrClosed", err)
	}
	if c := s.Conns()[0]; !c.Closed || c.CloseCode != http3.ErrCodeNoError || c.ClosedByClient {
		t.Errorf("conn %+v", c)
	}
	s.Close() // idempotent
}

func TestEnumAndActionStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{h3server.OK("x").String(), "respond@after-body status=200"},
		{h3server.EarlyResponse(202, nil, nil).String(), "respond@on-headers status=202"},
		{h3server.StallRead(time.Second).String(), "respond@after-body status=200 stall=1s"},
		{h3server.Reset(http3.ErrCodeInternalError).String(), "reset@after-body code=H3_INTERNAL_ERROR"},
		{h3server.GoAwayRejecting().String(), "goaway@on-headers id=stream+0"},
		{h3server.GoAwayAfter().WithClose().String(), "goaway@on-headers id=stream+4 close=H3_NO_ERROR"},
		{h3server.GoAway(8).WithDrop().String(), "goaway@on-headers id=8 drop"},
		{h3server.CloseConnAfterBody().String(), "close@after-body code=H3_NO_ERROR"},
		{h3server.StopSending(0).WithoutResponse().String(), "stop-sending@on-headers code=H3_NO_ERROR no-response"},
		{h3server.Hang(time.Second).WithInformational(103, nil).String(), "hang@after-body delay=1s informational=103"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if h3server.Kind(200).Valid() || !replaysafetest.StreamHang.Valid() || h3server.Moment(2).Valid() || !h3server.AfterBody.Valid() {
		t.Error("Valid")
	}
}
