package h3server_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kittest"
)

// hangFirst scripts a server whose first connection's first stream hangs
// for an hour (until a Kill ends it); every other stream is answered.
func hangFirst() h3server.Config {
	return h3server.Config{Conns: []h3server.ConnScript{{Streams: []h3server.Action{h3server.Hang(time.Hour)}}}, HangTimeout: time.Hour}
}

// hangingRequest sends a GET on cc that the server holds, and returns
// where its error arrives once the server has its HEADERS.
func hangingRequest(t *testing.T, s *h3server.Server, cc *http3.ClientConn) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _, err := roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/hang", nil))
		done <- err
	}()
	if err := s.WaitCount(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	return done
}

// wantRefused checks that the port is closed: a datagram sent to it from
// a connected UDP socket draws ICMP port unreachable, read as
// ECONNREFUSED.
func wantRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("hello?")); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("write to the closed port: %v", err)
	}
	if _, err := c.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("read from the closed port: %v, want ECONNREFUSED", err)
	}
}

// wantServes checks that the server at its same address, with its same
// certificate, answers a new connection, and returns that connection's
// index at the server.
func wantServes(t *testing.T, s *h3server.Server) int {
	t.Helper()
	cc := clientConn(t, s)
	res, body, err := roundTrip(t, cc, request(t, ctxT(t), s, "GET", "/after", nil))
	if err != nil || res.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("after Listen: %v %q %v", res, body, err)
	}
	rs := s.Requests()
	return rs[len(rs)-1].Conn
}

// TestKillCloseRefusesThenListensAgain: Kill(KillClose) ends the
// connection with CONNECTION_CLOSE(H3_NO_ERROR), which fails the request
// in flight at once; the port refuses until Listen, after which the same
// address and certificate serve a new connection, index 1.
func TestKillCloseRefusesThenListensAgain(t *testing.T) {
	s := start(t, hangFirst())
	addr := s.Addr()
	cc := clientConn(t, s)
	done := hangingRequest(t, s, cc)
	kittest.Returns(t, "Kill", func() {
		if err := s.Kill(h3server.KillClose); err != nil {
			t.Error(err)
		}
	})
	wantH3Error(t, <-done, http3.ErrCodeNoError)
	if c := s.Conns()[0]; !c.Closed || c.CloseCode != http3.ErrCodeNoError || c.ClosedByClient {
		t.Errorf("conn 0 after Kill: %+v", c)
	}
	wantRefused(t, addr)
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	if qc, err := s.Dial(ctx, nil); err == nil {
		qc.CloseWithError(0, "")
		t.Fatal("a QUIC dial to the killed server succeeded")
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Errorf("listening on %s, was %s", s.Addr(), addr)
	}
	if c := wantServes(t, s); c != 1 || s.Accepted() != 2 {
		t.Errorf("the request after Listen ran on connection %d of %d, want 1 of 2", c, s.Accepted())
	}
}

// TestKillSilentSendsNothing: Kill(KillSilent) ends the connection
// without a packet, and after Listen the server answers the old
// connection's packets with no stateless reset: the client, sending
// keep-alives all along, learns of the loss only by its idle timeout,
// and its request fails with it.
func TestKillSilentSendsNothing(t *testing.T) {
	s := start(t, hangFirst())
	qc, err := s.Dial(ctxT(t), &quic.Config{MaxIdleTimeout: time.Second, KeepAlivePeriod: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	cc := (&http3.Transport{}).NewClientConn(qc)
	done := hangingRequest(t, s, cc)
	if err := s.Restart(h3server.KillSilent, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if c := s.Conns()[0]; !c.Closed || c.CloseCode != 0 || c.ClosedByClient {
		t.Errorf("conn 0 after Kill: %+v", c)
	}
	select {
	case err := <-done:
		t.Fatalf("the request ended before the client's idle timeout: %v", err)
	default:
	}
	err = <-done
	<-qc.Context().Done() // the request may hear of the idle timeout before the connection's context ends
	cause := context.Cause(qc.Context())
	if _, ok := errors.AsType[*quic.IdleTimeoutError](cause); !ok || err == nil {
		t.Errorf("request: %v; connection: %v, want an idle timeout", err, cause)
	}
	if c := wantServes(t, s); c != 1 || s.Accepted() != 2 {
		t.Errorf("the request after Listen ran on connection %d of %d, want 1 of 2", c, s.Accepted())
	}
}

// TestKillAndListenOutOfTurn: Kill twice, Listen while listening, and
// both after Close fail; Close while killed returns.
func TestKillAndListenOutOfTurn(t *testing.T) {
	s := start(t, h3server.Config{})
	if err := s.Listen(); err == nil {
		t.Error("Listen while listening succeeded")
	}
	if err := s.Kill(h3server.KillSilent); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(h3server.KillClose); err == nil {
		t.Error("a second Kill succeeded")
	}
	kittest.Returns(t, "Close while killed", func() { s.Close() })
	if err := s.Listen(); !errors.Is(err, h3server.ErrClosed) {
		t.Errorf("Listen after Close: %v, want ErrClosed", err)
	}
	if err := s.Kill(h3server.KillClose); !errors.Is(err, h3server.ErrClosed) {
		t.Errorf("Kill after Close: %v, want ErrClosed", err)
	}
	if got := h3server.KillMode(7).String(); got != "KillMode(7)" || h3server.KillSilent.String() != "silent" {
		t.Errorf("KillMode strings: %q, %q", got, h3server.KillSilent)
	}
}
