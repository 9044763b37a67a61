package h2_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/transports/h2"
)

// bothModes runs f against an h2c and a TLS net/http server.
func bothModes(t *testing.T, h http.Handler, f func(t *testing.T, o *origin, cc *h2.ClientConn)) {
	for _, mode := range []string{"h2c", "tls"} {
		t.Run(mode, func(t *testing.T) {
			o := newOrigin(t, mode == "tls", h)
			f(t, o, o.conn(t, h2.Config{}))
		})
	}
}

func readAll(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

func echoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(500)
			return
		}
		sum := sha256.Sum256(body)
		w.Header().Set("X-Method", r.Method)
		w.Header().Set("X-Proto", r.Proto)
		w.Header().Set("X-Len", strconv.Itoa(len(body)))
		w.Header().Set("X-Sum", fmt.Sprintf("%x", sum))
		w.Header().Set("X-UA", r.UserAgent())
		w.Header().Set("X-Host", r.Host)
		w.Header().Set("X-CL", strconv.FormatInt(r.ContentLength, 10))
		if r.URL.Query().Get("big") != "" {
			n, _ := strconv.Atoi(r.URL.Query().Get("big"))
			w.Write(bytes.Repeat([]byte("z"), n))
			return
		}
		w.Write(body)
	})
}

func TestGetAndPost(t *testing.T) {
	bothModes(t, echoHandler(), func(t *testing.T, o *origin, cc *h2.ClientConn) {
		req, _ := http.NewRequest("GET", o.url()+"/get?x=1", nil)
		res, err := do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || res.Proto != "HTTP/2.0" || res.Status != "200 OK" || res.Header.Get("X-Method") != "GET" ||
			res.Header.Get("X-UA") != h2.DefaultUserAgent || res.Header.Get("X-Host") != o.addr || res.ContentLength != 0 {
			t.Fatalf("%v %v %v %d", res.Status, res.Proto, res.Header, res.ContentLength)
		}
		if (res.TLS != nil) != (o.tlsCfg != nil) {
			t.Fatalf("TLS state %v", res.TLS)
		}
		readAll(t, res)

		req, _ = http.NewRequest("POST", o.url()+"/post", strings.NewReader("payload"))
		res, err = do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, res); got != "payload" || res.Header.Get("X-CL") != "7" {
			t.Fatalf("%q %v", got, res.Header)
		}
		if o.requests.Load() != 2 || o.bodyIn.Load() != 7 {
			t.Fatalf("server saw %d requests, %d body bytes", o.requests.Load(), o.bodyIn.Load())
		}
	})
}

// Bodies larger than every window: flow control both ways.
func TestLargeBodies(t *testing.T) {
	const size = 5<<20 + 123
	bothModes(t, echoHandler(), func(t *testing.T, o *origin, cc *h2.ClientConn) {
		up := bytes.Repeat([]byte("0123456789abcdef"), size/16)
		req, _ := http.NewRequest("PUT", o.url()+"/up", bytes.NewReader(up))
		res, err := do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, res)
		if len(got) != len(up) || got != string(up) || res.Header.Get("X-Sum") != fmt.Sprintf("%x", sha256.Sum256(up)) {
			t.Fatalf("echo of %d bytes: %d bytes", len(up), len(got))
		}
		req, _ = http.NewRequest("GET", o.url()+"/down?big="+strconv.Itoa(size), nil)
		res, err = do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, res); len(got) != size {
			t.Fatalf("downloaded %d bytes", len(got))
		}
		if o.bodyIn.Load() != int64(len(up)) {
			t.Fatalf("server read %d body bytes", o.bodyIn.Load())
		}
	})
}

// A body of unknown length streamed from a pipe.
func TestStreamingBody(t *testing.T) {
	bothModes(t, echoHandler(), func(t *testing.T, o *origin, cc *h2.ClientConn) {
		pr, pw := io.Pipe()
		go func() {
			for i := range 100 {
				fmt.Fprintf(pw, "chunk %03d;", i)
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", o.url()+"/stream", pr)
		res, err := do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, res); len(got) != 1000 || res.Header.Get("X-CL") != "-1" {
			t.Fatalf("%d bytes, %v", len(got), res.Header)
		}
		if o.requests.Load() != 1 || o.bodyIn.Load() != 1000 {
			t.Fatalf("server saw %d requests, %d body bytes", o.requests.Load(), o.bodyIn.Load())
		}
	})
}

func TestTrailersBothWays(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Trailer", "X-Server-Trailer")
		w.WriteHeader(200)
		io.WriteString(w, "body")
		w.Header().Set("X-Server-Trailer", "got "+r.Trailer.Get("X-Client-Trailer"))
	})
	bothModes(t, h, func(t *testing.T, o *origin, cc *h2.ClientConn) {
		pr, pw := io.Pipe()
		req, _ := http.NewRequest("POST", o.url()+"/t", pr)
		req.Trailer = http.Header{"X-Client-Trailer": nil}
		go func() {
			io.WriteString(pw, "data")
			req.Trailer.Set("X-Client-Trailer", "hello")
			pw.Close()
		}()
		res, err := do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := res.Trailer["X-Server-Trailer"]; !ok {
			t.Fatalf("announced trailer missing: %v", res.Trailer)
		}
		if got := readAll(t, res); got != "body" {
			t.Fatal(got)
		}
		if got := res.Trailer.Get("X-Server-Trailer"); got != "got hello" {
			t.Fatalf("trailer %q (%v)", got, res.Trailer)
		}
		if o.requests.Load() != 1 {
			t.Fatalf("server saw %d requests", o.requests.Load())
		}
	})
}

func TestInformational(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(103)
		w.Header().Del("Link")
		io.WriteString(w, "final")
	})
	bothModes(t, h, func(t *testing.T, o *origin, cc *h2.ClientConn) {
		ev := &events{}
		req, _ := http.NewRequest("GET", o.url()+"/", nil)
		res, err := do(t, cc, req, ev)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, res)
		if got := ev.String(); got != "headers-written request-written response-started 1xx:103:</style.css>; rel=preload response:200" {
			t.Fatalf("events %q", got)
		}
		if o.requests.Load() != 1 {
			t.Fatalf("server saw %d requests", o.requests.Load())
		}
	})
}

func TestGzip(t *testing.T) {
	const text = "compressible compressible compressible"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			io.WriteString(w, "plain:"+r.Header.Get("Accept-Encoding"))
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, text)
		zw.Close()
	})
	bothModes(t, h, func(t *testing.T, o *origin, cc *h2.ClientConn) {
		req, _ := http.NewRequest("GET", o.url()+"/", nil)
		res, err := do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, res); got != text || !res.Uncompressed || res.Header.Get("Content-Encoding") != "" || res.ContentLength != -1 {
			t.Fatalf("%q uncompressed %v %v", got, res.Uncompressed, res.Header)
		}
		// A caller's own Accept-Encoding, a Range, or HEAD: no gzip asked.
		req, _ = http.NewRequest("GET", o.url()+"/", nil)
		req.Header.Set("Range", "bytes=0-1")
		res, err = do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, res); got != "plain:" {
			t.Fatalf("with Range: %q", got)
		}
		cc2 := o.conn(t, h2.Config{DisableCompression: true})
		req, _ = http.NewRequest("GET", o.url()+"/", nil)
		res, err = do(t, cc2, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, res); got != "plain:" {
			t.Fatalf("DisableCompression: %q", got)
		}
		if o.requests.Load() != 3 {
			t.Fatalf("server saw %d requests", o.requests.Load())
		}
	})
}

func TestHead(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1234")
		if r.Method != "HEAD" {
			w.Write(make([]byte, 1234))
		}
	})
	bothModes(t, h, func(t *testing.T, o *origin, cc *h2.ClientConn) {
		req, _ := http.NewRequest("HEAD", o.url()+"/", nil)
		res, err := do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.ContentLength != 1234 || res.Body != http.NoBody {
			t.Fatalf("length %d body %T", res.ContentLength, res.Body)
		}
		// The stream is over: the slot is free again.
		deadline := time.Now().Add(5 * time.Second)
		for cc.State().ActiveStreams != 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if s := cc.State(); s.ActiveStreams != 0 {
			t.Fatalf("state %+v", s)
		}
		if o.requests.Load() != 1 {
			t.Fatalf("server saw %d requests", o.requests.Load())
		}
	})
}

// Plain CONNECT (RFC 9113 §8.5): a full-duplex tunnel; the request body
// is upstream, the response body downstream.
func TestConnectTunnel(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "CONNECT" || r.Host != "upstream.example:443" {
			w.WriteHeader(400)
			return
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		buf := make([]byte, 64)
		for { // echo, upper-cased, line by line
			n, err := r.Body.Read(buf)
			if n > 0 {
				w.Write(bytes.ToUpper(buf[:n]))
				w.(http.Flusher).Flush()
			}
			if err != nil {
				return
			}
		}
	})
	bothModes(t, h, func(t *testing.T, o *origin, cc *h2.ClientConn) {
		pr, pw := io.Pipe()
		req, _ := http.NewRequest("CONNECT", o.url(), pr)
		req.Host = "upstream.example:443"
		res, err := do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
		buf := make([]byte, 16)
		for _, word := range []string{"ping", "pong", "done"} {
			io.WriteString(pw, word) // the tunnel is interactive: each word comes back before the next goes
			if _, err := io.ReadFull(res.Body, buf[:4]); err != nil || string(buf[:4]) != strings.ToUpper(word) {
				t.Fatalf("read %q, %v", buf[:4], err)
			}
		}
		pw.Close()
		if rest, err := io.ReadAll(res.Body); err != nil || len(rest) != 0 {
			t.Fatalf("after close: %q %v", rest, err)
		}
		res.Body.Close()
		if o.requests.Load() != 1 || o.bodyIn.Load() != 12 {
			t.Fatalf("server saw %d requests, %d body bytes", o.requests.Load(), o.bodyIn.Load())
		}
	})
}

// Extended CONNECT (RFC 8441) against net/http's server. By default it
// does not enable the protocol (GODEBUG http2xconnect=1 does, read from
// the environment at init): the request is then refused unsent. The
// test runs itself again with the setting to check the tunnel.
func TestExtendedConnect(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "CONNECT" || r.Header.Get(":protocol") != "websocket" || r.URL.Path != "/chat" {
			w.WriteHeader(400)
			return
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		buf := make([]byte, 64)
		for { // echo, flushing each read
			n, err := r.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				w.(http.Flusher).Flush()
			}
			if err != nil {
				return
			}
		}
	})
	enabled := strings.Contains(os.Getenv("GODEBUG"), "http2xconnect=1")
	bothModes(t, h, func(t *testing.T, o *origin, cc *h2.ClientConn) {
		pr, pw := io.Pipe()
		defer pw.Close()
		req, _ := http.NewRequest("CONNECT", o.url()+"/chat", pr)
		req.Header[":protocol"] = []string{"websocket"}
		res, err := do(t, cc, req, nil)
		if !enabled {
			if !errors.Is(err, h2.ErrUnsent) || !errors.Is(err, h2.ErrExtendedConnectUnsupported) || o.requests.Load() != 0 {
				t.Fatalf("err %v, server saw %d requests", err, o.requests.Load())
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
		io.WriteString(pw, "frame")
		buf := make([]byte, 5)
		if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "frame" {
			t.Fatalf("%q %v", buf, err)
		}
		pw.Close()
		res.Body.Close()
		if o.requests.Load() != 1 || o.bodyIn.Load() != 5 {
			t.Fatalf("server saw %d requests, %d body bytes", o.requests.Load(), o.bodyIn.Load())
		}
	})
	if !enabled && !t.Failed() {
		cmd := exec.Command(os.Args[0], "-test.run=^TestExtendedConnect$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "GODEBUG=http2xconnect=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestExtendedConnect/tls") {
			t.Fatalf("with http2xconnect=1: %v\n%s", err, out)
		}
	}
}

// Many streams at once on one connection; our own cap holds them back.
func TestConcurrency(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	})
	bothModes(t, h, func(t *testing.T, o *origin, _ *h2.ClientConn) {
		cc := o.conn(t, h2.Config{MaxConcurrentStreams: 20})
		const n = 200
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := "/" + strconv.Itoa(i)
				req, _ := http.NewRequest("GET", o.url()+path, nil)
				for !cc.Reserve() { // a pool would use another connection; here, wait
					time.Sleep(time.Millisecond)
				}
				res, err := cc.RoundTrip(req, nil)
				if err != nil {
					errs <- err
					return
				}
				if got := readAll(t, res); got != path {
					errs <- fmt.Errorf("got %q for %q", got, path)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if o.requests.Load() != n {
			t.Fatalf("server saw %d requests", o.requests.Load())
		}
		if s := cc.State(); s.ActiveStreams != 0 || s.Reserved != 0 || s.MaxConcurrentStreams != 20 || s.IdleSince.IsZero() {
			t.Fatalf("state %+v", s)
		}
		// Reserve is refused at the cap.
		held := 0
		for cc.Reserve() {
			held++
			if held > 100 {
				t.Fatal("Reserve never refused")
			}
		}
		if held != 20 {
			t.Fatalf("reserved %d slots, want 20", held)
		}
		for range held {
			cc.Unreserve()
		}
	})
}

// Cancelling the context resets the stream; the connection goes on.
func TestContextCancel(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-block:
			case <-r.Context().Done():
			}
			return
		}
		if r.URL.Path == "/body" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select {
			case <-block:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "ok")
	})
	bothModes(t, h, func(t *testing.T, o *origin, cc *h2.ClientConn) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", o.url()+"/slow", nil)
		if _, err := do(t, cc, req, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v", err)
		}
		// Cancelled while reading the body.
		ctx2, cancel2 := context.WithCancel(context.Background())
		req, _ = http.NewRequestWithContext(ctx2, "GET", o.url()+"/body", nil)
		res, err := do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(20*time.Millisecond, cancel2)
		if _, err := io.ReadAll(res.Body); !errors.Is(err, context.Canceled) {
			t.Fatalf("body err %v", err)
		}
		res.Body.Close()
		req, _ = http.NewRequest("GET", o.url()+"/fine", nil)
		res, err = do(t, cc, req, nil)
		if err != nil || readAll(t, res) != "ok" {
			t.Fatalf("next request: %v", err)
		}
		if o.requests.Load() != 3 {
			t.Fatalf("server saw %d requests", o.requests.Load())
		}
	})
}

// Closing a response body before its end resets the stream and frees
// the connection window it held.
func TestBodyCloseEarly(t *testing.T) {
	bothModes(t, echoHandler(), func(t *testing.T, o *origin, cc *h2.ClientConn) {
		for range 10 { // 10 x 5 MiB unread would exceed the 16 MiB connection window
			req, _ := http.NewRequest("GET", o.url()+"/?big="+strconv.Itoa(5<<20), nil)
			res, err := do(t, cc, req, nil)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1000)
			if _, err := io.ReadFull(res.Body, buf); err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if _, err := res.Body.Read(buf); !errors.Is(err, h2.ErrBodyClosed) {
				t.Fatalf("read after close: %v", err)
			}
		}
		if o.requests.Load() != 10 {
			t.Fatalf("server saw %d requests", o.requests.Load())
		}
	})
}

// Ping, Shutdown and Close.
func TestPingShutdownClose(t *testing.T) {
	bothModes(t, echoHandler(), func(t *testing.T, o *origin, cc *h2.ClientConn) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := cc.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if !cc.Settled() {
			t.Fatal("not settled after a PING round trip")
		}
		req, _ := http.NewRequest("GET", o.url()+"/", nil)
		res, err := do(t, cc, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cc.Shutdown(ctx) }()
		for !cc.State().Closed && cc.Reserve() { // Reserve turns false once GOAWAY is queued
			cc.Unreserve()
			time.Sleep(time.Millisecond)
		}
		readAll(t, res)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !errors.Is(cc.Err(), h2.ErrShutdown) {
			t.Fatalf("Err %v", cc.Err())
		}
		if o.requests.Load() != 1 {
			t.Fatalf("server saw %d requests", o.requests.Load())
		}

		cc2 := o.conn(t, h2.Config{})
		cc2.Close()
		<-cc2.Done()
		if cc2.Reserve() || !errors.Is(cc2.Err(), h2.ErrClosed) {
			t.Fatalf("after Close: %v", cc2.Err())
		}
	})
}

// events records StreamEvents as text.
type events struct {
	mu  sync.Mutex
	log []string
	id  uint32
	n   int64
}

func (e *events) add(s string) { e.mu.Lock(); e.log = append(e.log, s); e.mu.Unlock() }

func (e *events) HeadersWritten(id uint32) {
	e.mu.Lock()
	e.id = id
	e.mu.Unlock()
	e.add("headers-written")
}
func (e *events) BodyWritten(n int64) { e.mu.Lock(); e.n += n; e.mu.Unlock() }
func (e *events) RequestWritten()     { e.add("request-written") }
func (e *events) ResponseStarted()    { e.add("response-started") }
func (e *events) Informational(status int, h http.Header, size int) error {
	e.add(fmt.Sprintf("1xx:%d:%s", status, h.Get("Link")))
	return nil
}
func (e *events) ResponseHeaders(status int) { e.add(fmt.Sprintf("response:%d", status)) }
func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.log, " ")
}

var _ = httptrace.ClientTrace{}
