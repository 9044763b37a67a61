package replaysafe_test

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

// blackHole binds UDP on addr's port and drops every datagram, counting
// them: a QUIC handshake to it never completes.
func blackHole(t *testing.T, addr string) *atomic.Int64 {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var n atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return &n
}

// TestPreferHTTP3BlackHoledUDP: a TLS origin whose UDP port swallows
// every datagram. Under ProtocolPreferHTTP3 a call waits at most the
// head start for QUIC and goes over TCP, with any AcquireTimeout; the
// origin receives one copy per call. Once the background handshake has
// failed, the route is marked broken and later calls send no datagram.
func TestPreferHTTP3BlackHoledUDP(t *testing.T) {
	for _, acquire := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run("AcquireTimeout="+acquire.String(), func(t *testing.T) {
			s := start(t, replaysafetest.Config{TLS: true})
			dropped := blackHole(t, s.Addr())
			obs := &observed{}
			tr := replaysafe.New(replaysafe.Options{
				Protocol:        replaysafe.ProtocolPreferHTTP3,
				TLSClientConfig: s.ClientTLSConfig(),
				AcquireTimeout:  acquire,
				QUICConfig:      &quic.Config{HandshakeIdleTimeout: time.Second},
				Observer:        obs.observer(),
			})
			t.Cleanup(tr.CloseIdleConnections)
			code, body, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/first", "pay"))
			if err != nil || code != 200 || body != "ok" {
				t.Fatalf("%d %q %v", code, body, err)
			}
			// Without the race the call would wait out the QUIC handshake
			// (1 s idle timeout); with it, the head start (at most 300 ms,
			// half the acquisition deadline when that is shorter) and TCP.
			// The handshake still sends after the call is over: the call
			// did not wait for it to give up.
			afterCall := dropped.Load()
			waitFor(t, func() bool { return dropped.Load() > afterCall }, "a QUIC datagram after the call ended")
			wantCopies(t, s, "/first", 1)
			if as := obs.attemptsFor("/first"); len(as) != 1 || as[0].Events[0].Proto != fsm.ProtoH1 {
				t.Fatalf("attempts %+v", as)
			}
			if dropped.Load() == 0 {
				t.Fatal("no QUIC datagram reached the black hole: HTTP/3 was not tried")
			}
			// The background handshake gives up; the route is then broken.
			waitFor(t, func() bool {
				code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/probe", ""))
				if err != nil || code != 200 {
					t.Fatalf("probe: %d %v", code, err)
				}
				before := dropped.Load()
				time.Sleep(50 * time.Millisecond)
				return dropped.Load() == before
			}, "the QUIC handshake stops")
			before := dropped.Load()
			code, _, err = roundTrip(tr, newRequest(t, t.Context(), "PUT", s.URL()+"/later", "x"))
			if err != nil || code != 200 {
				t.Fatalf("later: %d %v", code, err)
			}
			if d := dropped.Load() - before; d != 0 {
				t.Errorf("%d datagrams after the route was marked broken", d)
			}
			wantCopies(t, s, "/later", 1)
		})
	}
}
