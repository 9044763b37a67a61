package driver

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm/plan"
	"github.com/replaysafe/replaysafe/internal/dial"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// TestH3SocketClosesWithTheLastConnection: a Transport's QUIC
// connections share one UDP socket, held while any of them is open, and
// closed with the last one also when the server is the side that closes
// them: here both stay pooled and idle, the client closing neither.
func TestH3SocketClosesWithTheLastConnection(t *testing.T) {
	var servers []*h3server.Server
	for range 2 {
		s, err := h3server.New(h3server.Config{Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		servers = append(servers, s)
	}
	tlsConf := servers[0].ClientTLSConfig()
	tlsConf.RootCAs.AddCert(servers[1].Certificate())
	tr := New(Config{Protocol: plan.HTTP3, TLSClientConfig: tlsConf, IdleConnTimeout: time.Hour, MaxIdleConnsPerHost: 2,
		Dial: dial.Config{DialContext: (&net.Dialer{}).DialContext}})
	defer tr.CloseIdle()

	for _, s := range servers {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", s.URL()+"/", nil)
		resp, err := roundTrip(t, tr, req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if refs, ok := udpRefs(tr); !ok || refs != 2 || tr.h3pool.IdleCount() != 2 {
		t.Fatalf("after two exchanges: socket open %v, %d connections on it, %d pooled; want 2 and 2", ok, refs, tr.h3pool.IdleCount())
	}

	if err := servers[0].Kill(h3server.KillClose); err != nil {
		t.Fatal(err)
	}
	waitUDP(t, tr, func(refs int, open bool) bool { return open && refs == 1 })
	if err := servers[1].Kill(h3server.KillClose); err != nil {
		t.Fatal(err)
	}
	waitUDP(t, tr, func(_ int, open bool) bool { return !open })
}

// udpRefs returns the connections on tr's IPv4 socket, and whether it
// is open.
func udpRefs(tr *Transport) (int, bool) {
	tr.udp.mu.Lock()
	defer tr.udp.mu.Unlock()
	sh := tr.udp.share["udp4"]
	if sh == nil {
		return 0, false
	}
	return sh.refs, true
}

// waitUDP waits up to 5 s for tr's IPv4 socket to satisfy ok.
func waitUDP(t *testing.T, tr *Transport, ok func(refs int, open bool) bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		refs, open := udpRefs(tr)
		if ok(refs, open) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket open %v, %d connections on it", open, refs)
		}
	}
}
