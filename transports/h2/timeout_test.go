package h2_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/replaysafe/replaysafe/transports/h2"
)

// pipeServer is a hand-driven HTTP/2 server on the far end of a
// net.Pipe, for tests under testing/synctest: it reads the client's
// frames on its own goroutine into frames (unless told to stop reading)
// and writes what the test asks.
type pipeServer struct {
	t      *testing.T
	c      net.Conn
	fr     *http2.Framer
	frames chan frameSeen
	read   chan bool     // false: stop reading at the next frame boundary (the client's writes then block)
	done   chan struct{} // closed by close
	henc   *hpack.Encoder
	hbuf   bytes.Buffer
}

// frameSeen is what the tests look at in a frame the client sent.
type frameSeen struct {
	Type   http2.FrameType
	Stream uint32
	Flags  http2.Flags
	Ping   [8]byte
	Code   http2.ErrCode
}

func newPipeServer(t *testing.T) (*pipeServer, net.Conn) {
	client, server := net.Pipe()
	s := &pipeServer{t: t, c: server, frames: make(chan frameSeen, 1000), read: make(chan bool, 1), done: make(chan struct{})}
	s.fr = http2.NewFramer(server, server)
	s.henc = hpack.NewEncoder(&s.hbuf)
	go s.readLoop()
	return s, client
}

func (s *pipeServer) readLoop() {
	defer close(s.frames)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(s.c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(nil, s.c)
	for {
		select {
		case on := <-s.read:
			for !on { // stopped until told to read again or closed
				select {
				case on = <-s.read:
				case <-s.done:
					return
				}
			}
		default:
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		seen := frameSeen{Type: f.Header().Type, Stream: f.Header().StreamID, Flags: f.Header().Flags}
		switch f := f.(type) {
		case *http2.PingFrame:
			seen.Ping = f.Data
		case *http2.RSTStreamFrame:
			seen.Code = f.ErrCode
		case *http2.GoAwayFrame:
			seen.Code = f.ErrCode
		}
		s.frames <- seen
	}
}

// next returns the next frame of type typ the client sent (skipping the
// others), or fails.
func (s *pipeServer) next(typ http2.FrameType) frameSeen {
	s.t.Helper()
	for f := range s.frames {
		if f.Type == typ {
			return f
		}
	}
	s.t.Fatalf("no %v frame: the client closed", typ)
	return frameSeen{}
}

// handshake sends the server's SETTINGS and ACKs the client's.
func (s *pipeServer) handshake() {
	s.fr.WriteSettings()
	s.fr.WriteSettingsAck()
}

func (s *pipeServer) respond(id uint32, body string) {
	s.hbuf.Reset()
	s.henc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: s.hbuf.Bytes(), EndHeaders: true})
	s.fr.WriteData(id, true, []byte(body))
}

func (s *pipeServer) close() {
	close(s.done)
	s.c.Close()
	for range s.frames {
	}
}

// startConn opens a ClientConn on the pipe.
func startConn(t *testing.T, c net.Conn, cfg h2.Config) *h2.ClientConn {
	cc, err := h2.NewClientConn(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

func get(t *testing.T, cc *h2.ClientConn, ctx context.Context) chan error {
	errc := make(chan error, 1)
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://pipe.example/", nil)
	if !cc.Reserve() {
		t.Fatal("Reserve")
	}
	go func() {
		res, err := cc.RoundTrip(req, nil)
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		errc <- err
	}()
	return errc
}

// A silent peer is detected by the liveness PING: PING after PingAfter
// without a frame, dead PingTimeout later.
func TestLivenessPingTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newPipeServer(t)
		defer srv.close()
		cc := startConn(t, c, h2.Config{})
		srv.handshake()
		synctest.Wait()
		start := time.Now()
		errc := get(t, cc, context.Background())
		srv.next(http2.FrameHeaders)
		ping := srv.next(http2.FramePing)
		if ping.Flags.Has(http2.FlagPingAck) || time.Since(start) != h2.DefaultPingAfter {
			t.Fatalf("PING %+v after %v", ping, time.Since(start))
		}
		err := <-errc
		var te *h2.TimeoutError
		if !errors.As(err, &te) || te.Kind != h2.TimeoutPing || time.Since(start) != h2.DefaultPingAfter+h2.DefaultPingTimeout {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || errors.Is(err, h2.ErrUnsent) {
			t.Fatalf("err %v", err)
		}
		<-cc.Done()
		if !errors.As(cc.Err(), &te) {
			t.Fatalf("Err %v", cc.Err())
		}
	})
}

// A peer that answers the PINGs keeps a slow stream alive.
func TestLivenessPingAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newPipeServer(t)
		defer srv.close()
		cc := startConn(t, c, h2.Config{})
		srv.handshake()
		errc := get(t, cc, context.Background())
		h := srv.next(http2.FrameHeaders)
		start := time.Now()
		pings := 0
		for time.Since(start) < 10*time.Second {
			p := srv.next(http2.FramePing)
			pings++
			srv.fr.WritePing(true, p.Ping)
		}
		srv.respond(h.Stream, "slow")
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if pings != 5 {
			t.Fatalf("%d PINGs in 10 s", pings)
		}
		cc.Close()
		<-cc.Done()
	})
}

// No stream, no liveness PING.
func TestLivenessIdleNoPing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newPipeServer(t)
		cc := startConn(t, c, h2.Config{PingAfter: time.Second})
		srv.handshake()
		time.Sleep(time.Minute)
		synctest.Wait()
		cc.Close()
		<-cc.Done()
		srv.c.Close()
		for f := range srv.frames {
			if f.Type == http2.FramePing {
				t.Fatal("PING on an idle connection")
			}
		}
	})
}

// SETTINGS never arriving: the connection ends with SETTINGS_TIMEOUT
// after SettingsTimeout; a request waiting then was not sent if its
// HEADERS never left.
func TestSettingsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newPipeServer(t)
		defer srv.close()
		start := time.Now()
		cc := startConn(t, c, h2.Config{PingAfter: -1})
		<-cc.Done()
		var te *h2.TimeoutError
		if !errors.As(cc.Err(), &te) || te.Kind != h2.TimeoutSettings || time.Since(start) != h2.DefaultSettingsTimeout {
			t.Fatalf("Err %v after %v", cc.Err(), time.Since(start))
		}
		g := srv.next(http2.FrameGoAway)
		if g.Code != http2.ErrCodeSettingsTimeout {
			t.Fatalf("GOAWAY %v", g.Code)
		}
	})
}

// The server's SETTINGS came, but ours are never acknowledged.
func TestSettingsAckTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newPipeServer(t)
		defer srv.close()
		start := time.Now()
		cc := startConn(t, c, h2.Config{SettingsTimeout: 3 * time.Second})
		srv.fr.WriteSettings()
		<-cc.Done()
		var te *h2.TimeoutError
		if !errors.As(cc.Err(), &te) || te.Kind != h2.TimeoutSettings || time.Since(start) != 3*time.Second {
			t.Fatalf("Err %v after %v", cc.Err(), time.Since(start))
		}
	})
}

// Close never blocks on a stuck write: the peer reads nothing, a request
// body fills the pipe, Close returns at once and everything ends.
func TestCloseWithStuckWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newPipeServer(t)
		defer srv.close()
		cc := startConn(t, c, h2.Config{PingAfter: -1})
		srv.handshake()
		srv.next(http2.FrameSettings)
		srv.read <- false // the server stops reading
		req, _ := http.NewRequest("POST", "http://pipe.example/", bytes.NewReader(make([]byte, 1<<20)))
		cc.Reserve()
		errc := make(chan error, 1)
		go func() {
			_, err := cc.RoundTrip(req, nil)
			errc <- err
		}()
		synctest.Wait() // the writer is blocked in Write
		start := time.Now()
		cc.Close()
		if time.Since(start) != 0 {
			t.Fatal("Close waited")
		}
		if err := <-errc; err == nil {
			t.Fatal("RoundTrip succeeded")
		}
		<-cc.Done()
	})
}

// WriteByteTimeout: a write that makes no progress fails the connection.
// The server reads the client's first batch (preface, SETTINGS, window
// update), sends its SETTINGS and reads nothing more: the client's ACK
// write blocks, and a request queued behind it is never written.
func TestWriteByteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, server := net.Pipe()
		defer server.Close()
		cc := startConn(t, client, h2.Config{PingAfter: -1, WriteByteTimeout: 3 * time.Second})
		first := make([]byte, len(http2.ClientPreface)+9+4*6+9+4)
		if _, err := io.ReadFull(server, first); err != nil {
			t.Fatal(err)
		}
		http2.NewFramer(server, nil).WriteSettings()
		synctest.Wait() // the client's ACK write is blocked
		start := time.Now()
		err := <-get(t, cc, context.Background())
		var we *h2.WriteError
		if !errors.As(err, &we) || !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != 3*time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
		if !errors.Is(err, h2.ErrUnsent) {
			t.Fatalf("err %v: want ErrUnsent", err)
		}
		<-cc.Done()
	})
}

// Shutdown waits for the open streams; its context bounds the wait.
func TestShutdownDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newPipeServer(t)
		defer srv.close()
		cc := startConn(t, c, h2.Config{PingAfter: -1})
		srv.handshake()
		errc := get(t, cc, context.Background())
		h := srv.next(http2.FrameHeaders)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		go func() {
			g := srv.next(http2.FrameGoAway)
			if g.Code != http2.ErrCodeNo {
				t.Errorf("GOAWAY %v", g.Code)
			}
		}()
		if err := cc.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 5*time.Second {
			t.Fatalf("Shutdown %v after %v", err, time.Since(start))
		}
		if err := <-errc; !errors.Is(err, h2.ErrClosed) {
			t.Fatalf("stream %d: %v", h.Stream, err)
		}
	})
}

// Shutdown completes once the last stream does.
func TestShutdownGraceful(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newPipeServer(t)
		defer srv.close()
		cc := startConn(t, c, h2.Config{PingAfter: -1})
		srv.handshake()
		errc := get(t, cc, context.Background())
		h := srv.next(http2.FrameHeaders)
		done := make(chan error, 1)
		go func() { done <- cc.Shutdown(context.Background()) }()
		srv.next(http2.FrameGoAway)
		if cc.Reserve() {
			t.Fatal("Reserve during Shutdown")
		}
		time.Sleep(time.Second)
		srv.respond(h.Stream, "last")
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
