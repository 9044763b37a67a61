package h2_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// scripted starts an h2server (h2c or TLS) closed at the end of the test.
func scripted(t *testing.T, useTLS bool, cfg h2server.Config) *h2server.Server {
	t.Helper()
	cfg.TLS = useTLS
	if cfg.Lifetime == 0 {
		cfg.Lifetime = 20 * time.Second
	}
	s, err := h2server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func dialScripted(t *testing.T, s *h2server.Server) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := s.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

func connTo(t *testing.T, nc net.Conn) *h2.ClientConn {
	t.Helper()
	cc, err := h2.NewClientConn(nc, h2.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		<-cc.Done()
	})
	return cc
}

func waitRequests(t *testing.T, s *h2server.Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitRequests(ctx, n); err != nil {
		t.Fatalf("waiting for %d requests: %v (got %d)", n, err, s.Count())
	}
}

func bothTLS(t *testing.T, f func(t *testing.T, useTLS bool)) {
	for _, mode := range []string{"h2c", "tls"} {
		t.Run(mode, func(t *testing.T) { f(t, mode == "tls") })
	}
}

// RFC 9113 §8.7: REFUSED_STREAM proves the request was not processed.
func TestEvidenceRefusedStream(t *testing.T) {
	bothTLS(t, func(t *testing.T, useTLS bool) {
		s := scripted(t, useTLS, h2server.Config{Default: h2server.Every(h2server.Refuse())})
		cc := connTo(t, dialScripted(t, s))
		ev := &events{}
		req, _ := http.NewRequest("GET", s.URL()+"/refused", nil)
		_, err := do(t, cc, req, ev)
		var se *h2.StreamError
		if !errors.As(err, &se) || !se.Unprocessed() || se.Code != http2.ErrCodeRefusedStream || !se.Remote || se.StreamID != 1 {
			t.Fatalf("err %v", err)
		}
		if got := ev.String(); got != "headers-written request-written" || ev.id != 1 {
			t.Fatalf("events %q (stream %d)", got, ev.id)
		}
		waitRequests(t, s, 1)
		if r := s.Receipts(); len(r) != 1 || !r[0].Unprocessed || s.Count() != 1 {
			t.Fatalf("server receipts %+v", r)
		}
		if cc.Closed() {
			t.Fatal("a refused stream ended the connection")
		}
	})
}

// RFC 9113 §6.8: a GOAWAY whose last stream ID is below ours proves that
// our stream was not processed; the stream at or below it completes.
func TestEvidenceGoAwayBelow(t *testing.T) {
	bothTLS(t, func(t *testing.T, useTLS bool) {
		s := scripted(t, useTLS, h2server.Config{Conns: []h2server.ConnScript{{Streams: []h2server.Action{
			h2server.OK("first"),
			h2server.GoAwayBelow().WithClose(h2server.CloseFIN),
		}}}})
		cc := connTo(t, dialScripted(t, s))
		req, _ := http.NewRequest("GET", s.URL()+"/1", nil)
		res, err := do(t, cc, req, nil)
		if err != nil || readAll(t, res) != "first" {
			t.Fatalf("first: %v", err)
		}
		ev := &events{}
		req, _ = http.NewRequest("POST", s.URL()+"/2", strings.NewReader("body"))
		_, err = do(t, cc, req, ev)
		var ge *h2.GoAwayError
		if !errors.As(err, &ge) || !ge.Unprocessed() || ge.LastStreamID != 1 || ge.StreamID != 3 {
			t.Fatalf("err %v", err)
		}
		// The GOAWAY may be read before the writer reports the write of
		// our HEADERS; the stream then fails at once, with no event.
		if got := ev.String(); got != "" && got != "headers-written" && got != "headers-written request-written" {
			t.Fatalf("events %q", got)
		}
		if g, ok := cc.GoAway(); !ok || g.LastStreamID != 1 {
			t.Fatalf("GoAway() %+v %v", g, ok)
		}
		if cc.Reserve() {
			t.Fatal("Reserve after GOAWAY")
		}
		waitRequests(t, s, 2)
		if s.Count() != 2 {
			t.Fatalf("server saw %d streams", s.Count())
		}
		<-cc.Done()
	})
}

// A GOAWAY naming our own stream, then a close: the boundary proves
// nothing for it.
func TestEvidenceGoAwayAtThenClose(t *testing.T) {
	bothTLS(t, func(t *testing.T, useTLS bool) {
		s := scripted(t, useTLS, h2server.Config{Default: h2server.Every(h2server.GoAwayAt().WithClose(h2server.CloseFIN))})
		cc := connTo(t, dialScripted(t, s))
		req, _ := http.NewRequest("GET", s.URL()+"/at", nil)
		_, err := do(t, cc, req, nil)
		var ge *h2.GoAwayError
		if !errors.As(err, &ge) || ge.Unprocessed() || ge.LastStreamID != 1 || ge.StreamID != 1 || errors.Is(err, h2.ErrUnsent) {
			t.Fatalf("err %v", err)
		}
		waitRequests(t, s, 1)
		if s.Count() != 1 {
			t.Fatalf("server saw %d", s.Count())
		}
	})
}

// gatedConn holds its first Write (the preface, maybe with HEADERS)
// until gate is signalled or the conn closed; with cut, the first Write
// that carries a HEADERS frame is cut right after that frame and fails,
// and so does every later Write: one stream's HEADERS leave, the next
// one's do not.
type gatedConn struct {
	net.Conn
	gate      chan struct{}
	cut       bool
	closed    chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex
	writes    int
	failed    bool
}

func newGatedConn(c net.Conn, cut bool) *gatedConn {
	return &gatedConn{Conn: c, gate: make(chan struct{}, 1), cut: cut, closed: make(chan struct{})}
}

func (c *gatedConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *gatedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	first := c.writes == 1
	c.mu.Unlock()
	if first {
		select {
		case <-c.gate:
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed {
		return 0, syscall.EPIPE
	}
	if n := endOfFirstFrame(p, http2.FrameHeaders); c.cut && n > 0 {
		c.failed = true
		k, _ := c.Conn.Write(p[:n])
		return k, syscall.EPIPE
	}
	return c.Conn.Write(p)
}

// endOfFirstFrame returns the offset just past the first frame of type
// t in p, or 0.
func endOfFirstFrame(p []byte, t http2.FrameType) int {
	off := 0
	if strings.HasPrefix(string(p), http2.ClientPreface) {
		off = len(http2.ClientPreface)
	}
	for off+9 <= len(p) {
		n := int(binary.BigEndian.Uint32(append([]byte{0}, p[off:off+3]...)))
		if http2.FrameType(p[off+3]) == t {
			return off + 9 + n
		}
		off += 9 + n
	}
	return 0
}

// waitState polls cc until cond holds (a bounded loop for the test).
func waitState(t *testing.T, cc *h2.ClientConn, cond func(h2.ConnState) bool) {
	t.Helper()
	for range 5000 {
		if cond(cc.State()) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("state %+v", cc.State())
}

// A write that fails after one stream's HEADERS: that stream has the
// write error with HeadersWritten; the next one, whose HEADERS came
// after the accepted bytes, gets ErrUnsent; the server saw one stream.
func TestEvidenceWriteFailureEndsOnlyWhatItMust(t *testing.T) {
	bothTLS(t, func(t *testing.T, useTLS bool) {
		s := scripted(t, useTLS, h2server.Config{Default: h2server.Every(h2server.Hang(5 * time.Second))})
		gc := newGatedConn(dialScripted(t, s), true)
		cc := connTo(t, gc)
		type result struct {
			err error
			ev  *events
		}
		results := make([]chan result, 2)
		for i := range results {
			results[i] = make(chan result, 1)
			ev := &events{}
			req, _ := http.NewRequest("GET", s.URL()+"/"+string(rune('a'+i)), nil)
			if !cc.Reserve() {
				t.Fatal("Reserve")
			}
			go func() {
				_, err := cc.RoundTrip(req, ev)
				results[i] <- result{err, ev}
			}()
			waitState(t, cc, func(s h2.ConnState) bool { return s.ActiveStreams == i+1 })
		}
		gc.gate <- struct{}{} // both HEADERS are queued behind the preface
		a, b := <-results[0], <-results[1]
		var we *h2.WriteError
		if !errors.As(a.err, &we) || !we.HeadersWritten || we.StreamID != 1 || errors.Is(a.err, h2.ErrUnsent) || !errors.Is(a.err, syscall.EPIPE) {
			t.Fatalf("first stream: %v", a.err)
		}
		if !errors.Is(b.err, h2.ErrUnsent) || !errors.As(b.err, &we) || we.HeadersWritten {
			t.Fatalf("second stream: %v", b.err)
		}
		if a.ev.String() != "headers-written request-written" || b.ev.String() != "" {
			t.Fatalf("events %q, %q", a.ev.String(), b.ev.String())
		}
		<-cc.Done()
		// The first stream may or may not have been read by the server
		// (our close can reset the TCP connection under its bytes); the
		// second never reached it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.WaitConnClosed(ctx, 0); err != nil {
			t.Fatal(err)
		}
		for _, r := range s.Requests() {
			if r.Path != "/a" {
				t.Fatalf("server received %s", r.Path)
			}
		}
	})
}

// A request whose HEADERS never reached the socket when the connection
// is closed gets ErrUnsent; the server saw nothing.
func TestEvidenceClosedBeforeWrite(t *testing.T) {
	s := scripted(t, false, h2server.Config{})
	gc := newGatedConn(dialScripted(t, s), false)
	cc := connTo(t, gc)
	req, _ := http.NewRequest("GET", s.URL()+"/", nil)
	errc := make(chan error, 1)
	if !cc.Reserve() {
		t.Fatal("Reserve")
	}
	go func() {
		_, err := cc.RoundTrip(req, nil)
		errc <- err
	}()
	waitState(t, cc, func(s h2.ConnState) bool { return s.ActiveStreams == 1 })
	cc.Close()
	if err := <-errc; !errors.Is(err, h2.ErrUnsent) || !errors.Is(err, h2.ErrClosed) {
		t.Fatalf("err %v", err)
	}
	if s.Count() != 0 {
		t.Fatalf("server saw %d", s.Count())
	}
}

// failingBody returns some bytes, then err.
type failingBody struct {
	n   int
	err error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, b.err
	}
	k := min(len(p), b.n)
	b.n -= k
	return k, nil
}
func (b *failingBody) Close() error { return nil }

// A request body that fails resets only its stream (CANCEL); the other
// streams of the connection complete.
func TestEvidenceBodyFailureResetsOnlyItsStream(t *testing.T) {
	bothTLS(t, func(t *testing.T, useTLS bool) {
		s := scripted(t, useTLS, h2server.Config{})
		cc := connTo(t, dialScripted(t, s))
		boom := errors.New("disk on fire")
		var wg sync.WaitGroup
		errs := make(chan error, 10)
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var req *http.Request
				if i == 5 {
					req, _ = http.NewRequest("POST", s.URL()+"/fail", &failingBody{n: 100, err: boom})
					req.ContentLength = 1000
				} else {
					req, _ = http.NewRequest("POST", s.URL()+"/ok", strings.NewReader("fine"))
				}
				res, err := do(t, cc, req, nil)
				if i == 5 {
					var be *h2.RequestBodyError
					if !errors.As(err, &be) || !errors.Is(err, boom) {
						errs <- errors.New("failing body: " + errString(err))
					}
					return
				}
				if err != nil {
					errs <- err
					return
				}
				if got := readAll(t, res); got != "ok" {
					errs <- errors.New("body " + got)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		waitRequests(t, s, 10)
		reset := 0
		for _, r := range s.Requests() {
			if r.Path == "/fail" {
				if !r.ClientReset || r.ClientResetCode != http2.ErrCodeCancel || r.EndStream {
					t.Fatalf("failed stream as received: %+v", r)
				}
				reset++
			} else if !r.EndStream || string(r.Body) != "fine" {
				t.Fatalf("stream as received: %+v", r)
			}
		}
		if reset != 1 || cc.Closed() {
			t.Fatalf("%d resets; closed %v", reset, cc.Closed())
		}
	})
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// nginx-like: a request body arriving before the client acknowledged the
// server's SETTINGS is refused. The refusal is reported as unprocessed;
// once settled, the same connection takes the body.
func TestEvidenceBodyBeforeSettingsAckRefused(t *testing.T) {
	s := scripted(t, false, h2server.Config{RefuseBodyBeforeSettingsAck: true})
	cc := connTo(t, dialScripted(t, s))
	req, _ := http.NewRequest("POST", s.URL()+"/first", strings.NewReader("body"))
	_, err := do(t, cc, req, nil)
	var se *h2.StreamError
	if !errors.As(err, &se) || !se.Unprocessed() {
		t.Fatalf("first POST: %v", err)
	}
	req, _ = http.NewRequest("POST", s.URL()+"/second", strings.NewReader("body"))
	res, err := do(t, cc, req, nil)
	if err != nil || readAll(t, res) != "ok" {
		t.Fatalf("second POST: %v", err)
	}
	waitRequests(t, s, 2)
	if r := s.Requests(); !r[0].PrereadRefused || string(r[1].Body) != "body" {
		t.Fatalf("received %+v", r)
	}
}

// An interim response flood is cut at Config.MaxInformational.
func TestEvidenceInformationalFlood(t *testing.T) {
	s := scripted(t, false, h2server.Config{Default: h2server.Every(h2server.Endless1xx(103))})
	cc := connTo(t, dialScripted(t, s))
	req, _ := http.NewRequest("GET", s.URL()+"/", nil)
	_, err := do(t, cc, req, nil)
	if !errors.Is(err, h2.ErrTooManyInformational) {
		t.Fatalf("err %v", err)
	}
}

// A response cut inside its header block, then a close: the stream had
// started (ResponseStarted), the error is the read error.
func TestEvidencePartialHeaders(t *testing.T) {
	s := scripted(t, false, h2server.Config{Default: h2server.Every(h2server.PartialHeaders())})
	cc := connTo(t, dialScripted(t, s))
	ev := &events{}
	req, _ := http.NewRequest("GET", s.URL()+"/", nil)
	_, err := do(t, cc, req, ev)
	var re *h2.ReadError
	if !errors.As(err, &re) || !errors.Is(err, io.EOF) || errors.Is(err, h2.ErrUnsent) {
		t.Fatalf("err %v", err)
	}
	if ev.String() != "headers-written request-written response-started" {
		t.Fatalf("events %q", ev.String())
	}
}

// A server with a tiny stream window: the body (read early, since it is
// in memory) leaves in window-sized pieces as the server grants more.
func TestSmallServerWindowUpload(t *testing.T) {
	bothTLS(t, func(t *testing.T, useTLS bool) {
		s := scripted(t, useTLS, h2server.Config{Settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 100}}})
		cc := connTo(t, dialScripted(t, s))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := cc.Ping(ctx); err != nil { // settled: the window is 100
			t.Fatal(err)
		}
		body := strings.Repeat("w", 10000)
		for _, streamed := range []bool{false, true} {
			var r io.Reader = strings.NewReader(body)
			if streamed {
				r = io.MultiReader(r) // no GetBody: the upload goroutine reads it
			}
			ev := &events{}
			req, _ := http.NewRequest("PUT", s.URL()+"/w", r)
			req.ContentLength = int64(len(body))
			res, err := do(t, cc, req, ev)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, res)
			// The writer's last report may follow the response's end.
			for i := 0; i < 5000 && !strings.Contains(ev.String(), "request-written"); i++ {
				time.Sleep(time.Millisecond)
			}
			ev.mu.Lock()
			n := ev.n
			ev.mu.Unlock()
			if n != int64(len(body)) || !strings.Contains(ev.String(), "request-written") {
				t.Fatalf("BodyWritten reported %d bytes; events %q", n, ev.String())
			}
		}
		waitRequests(t, s, 2)
		for _, r := range s.Requests() {
			if string(r.Body) != body {
				t.Fatalf("server received %d bytes", len(r.Body))
			}
		}
	})
}

// orderEvents records, under a lock, whether RequestWritten came.
type orderEvents struct {
	h2.NopEvents
	mu      sync.Mutex
	written bool
}

func (e *orderEvents) RequestWritten() {
	e.mu.Lock()
	e.written = true
	e.mu.Unlock()
}

// TestEvidenceRequestWrittenBeforeBodyEnd: a POST whose small body leaves
// with its HEADERS, answered once the server read it all, gets
// RequestWritten before its response body's io.EOF, however the writer's
// report and the reader race: the body's end waits for the report on our
// END_STREAM frame, so a caller sees the exchange end cleanly (both
// directions done) when it did. 50 requests on one connection, counted at
// the server.
func TestEvidenceRequestWrittenBeforeBodyEnd(t *testing.T) {
	bothTLS(t, func(t *testing.T, useTLS bool) {
		s := scripted(t, useTLS, h2server.Config{Default: h2server.Every(h2server.OK("ok"))})
		cc := connTo(t, dialScripted(t, s))
		for i := range 50 {
			var ev orderEvents
			req, _ := http.NewRequest("POST", s.URL()+"/p", strings.NewReader("small body"))
			if !cc.Reserve() {
				t.Fatalf("request %d: no room", i)
			}
			res, err := cc.RoundTrip(req, &ev)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if _, err := io.ReadAll(res.Body); err != nil {
				t.Fatalf("request %d: body: %v", i, err)
			}
			ev.mu.Lock()
			written := ev.written
			ev.mu.Unlock()
			if !written {
				t.Fatalf("request %d: the body ended before RequestWritten", i)
			}
			res.Body.Close()
		}
		waitRequests(t, s, 50)
	})
}
