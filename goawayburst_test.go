package replaysafe_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

// TestH2CGoAwayBurstConnections: the nginx h2c GOAWAY burst against the
// scripted server. A server that serves 10 streams per connection over
// h2c and then sends a graceful GOAWAY (nginx keepalive_requests 10:
// MaxRequestsPerConn) gets a burst of 64 GETs from a fresh client, 30
// runs of replaysafe one after the other, so that the server's count of
// accepted connections is each run's. In every run replaysafe opens no
// more connections than net/http's h2c client (http.Transport with
// Protocols UnencryptedHTTP2) opened for the same burst on a server of
// its own, meanwhile, and at most twice ⌈64 ÷ 10⌉ = 7, the fewest any
// client can (it opens 7, now and then 8;
// before the shared redial, one run in 30 opened 36: issue 33);
// replaysafe delivers all 64 and the server processes each GET exactly
// once. net/http runs once: its h2c client dials through its HTTP/1.1
// pool, a connection for each request that finds none ready (70 to 180
// a burst), and waits 1, 2, 4 s before its second, third and fourth
// GOAWAY retries, so that one burst takes 7 s, nearly all of it waiting.
func TestH2CGoAwayBurstConnections(t *testing.T) {
	const n, perConn, runs = 64, 10, 30
	cfg := h2server.Config{MaxRequestsPerConn: perConn}

	peer := startH2(t, cfg)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	std := &http.Transport{Protocols: &protos}
	t.Cleanup(std.CloseIdleConnections)
	peerDone := make(chan int, 1)
	go func() {
		failed := 0
		for _, err := range burst(t, std, peer.URL(), n) {
			if err != nil {
				failed++
			}
		}
		std.CloseIdleConnections()
		peerDone <- failed
	}()

	s := startH2(t, cfg)
	var perRun []int
	failed := 0
	for run := range runs {
		tr, _ := h2Client(t, s, replaysafe.Options{})
		before := s.Accepted()
		prefix := fmt.Sprintf("/r%d", run)
		errs := burst(t, tr, s.URL()+prefix, n)
		tr.CloseIdleConnections()
		perRun = append(perRun, s.Accepted()-before)
		for i, err := range errs {
			path := fmt.Sprintf("%s/b%d", prefix, i)
			if err != nil {
				if failed++; failed <= 3 {
					t.Errorf("%s: %v", path, err)
				}
			}
			if got, all := len(processed(s, path)), len(h2Copies(s, path)); got != 1 || all > 2 {
				t.Errorf("%s processed %d times, arrived %d", path, got, all)
			}
		}
	}
	peerFailed := <-peerDone
	peerConns := peer.Accepted()
	t.Logf("connections per run, replaysafe: %v; net/http: %d (%d of %d calls failed)", perRun, peerConns, peerFailed, n)
	if failed != 0 {
		t.Errorf("replaysafe: %d of %d calls failed", failed, runs*n)
	}
	for run, c := range perRun {
		if want := 2 * ((n + perConn - 1) / perConn); c > want || c > peerConns {
			t.Errorf("run %d: replaysafe opened %d connections, want ≤ %d and ≤ net/http's %d", run, c, want, peerConns)
		}
	}
}
