package replaysafe_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// udpRelay relays the datagrams of one client to the server at addr and
// back, on 127.0.0.1, until vanish is called: from then on it drops
// every datagram both ways, as a server killed without a stateless reset
// looks to its clients. It stops with the test.
type udpRelay struct {
	front, back net.PacketConn
	dropped     atomic.Int64
	gone        atomic.Bool
}

func startUDPRelay(t *testing.T, addr string) *udpRelay {
	t.Helper()
	server, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	front, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		front.Close()
		t.Fatal(err)
	}
	r := &udpRelay{front: front, back: back}
	var client atomic.Pointer[net.Addr]
	var wg sync.WaitGroup
	t.Cleanup(func() { front.Close(); back.Close(); wg.Wait() })
	pump := func(from, to net.PacketConn, dest func() net.Addr, remember bool) {
		buf := make([]byte, 64<<10)
		for {
			n, src, err := from.ReadFrom(buf)
			if err != nil {
				return
			}
			if remember {
				client.Store(&src)
			}
			if r.gone.Load() {
				r.dropped.Add(1)
				continue
			}
			if d := dest(); d != nil {
				to.WriteTo(buf[:n], d)
			}
		}
	}
	wg.Go(func() { pump(front, back, func() net.Addr { return server }, true) })
	wg.Go(func() {
		pump(back, front, func() net.Addr {
			if c := client.Load(); c != nil {
				return *c
			}
			return nil
		}, false)
	})
	return r
}

// Addr is the address the client dials.
func (r *udpRelay) Addr() string { return r.front.LocalAddr().String() }

// vanish drops every datagram from now on.
func (r *udpRelay) vanish() { r.gone.Store(true) }

// TestH3VanishedServerFoundInSeconds: an HTTP/3 connection whose server
// vanishes (every datagram dropped from then on, no stateless reset).
// With the default QUIC configuration the next GET on that connection
// ends with QUIC's idle timeout, the keep-alive PINGs unanswered: a
// timeout (RS06), never resent, long before the request's own one-minute
// deadline and quic-go's 30 s default. The server saw the first GET
// only; the relay dropped the GET's packets and the PINGs.
func TestH3VanishedServerFoundInSeconds(t *testing.T) {
	s := startH3(t, h3server.Config{})
	relay := startUDPRelay(t, s.Addr())
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP3, TLSClientConfig: s.ClientTLSConfig()})
	t.Cleanup(tr.CloseIdleConnections)
	base := "https://" + relay.Addr()
	if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", base+"/first", "")); err != nil || code != 200 {
		t.Fatalf("first GET: %d %v", code, err)
	}
	relay.vanish()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, _, err := roundTrip(tr, newRequest(t, ctx, "GET", base+"/second", ""))
	var e *replaysafe.Error
	if !errors.As(err, &e) || e.Rule != fsm.RuleTimeout || e.Attempts != 1 {
		t.Fatalf("second GET: %v, want a timeout (RS06) after 1 attempt", err)
	}
	if ie, ok := errors.AsType[*quic.IdleTimeoutError](err); !ok || ctx.Err() != nil {
		t.Fatalf("second GET: %v (%v), want QUIC's idle timeout before the request's deadline", err, ie)
	}
	if n := s.Count(); n != 1 {
		t.Errorf("server got %d requests, want 1", n)
	}
	if relay.dropped.Load() == 0 {
		t.Error("the relay dropped nothing")
	}
}
