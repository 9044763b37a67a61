package replaysafe_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
)

// TestH2NoForceClosedStreams: 16 goroutines share a Transport against an
// HTTP/2 server whose handler streams a slow response, while callers
// abandon a third of the responses early and cancel another third
// mid-body, and the pool's idle cap (1) closes connections as their
// attempts end. No call may fail with x/net's
// "client connection force closed": a connection the pool closes while
// x/net still finishes a stream on it closes gracefully.
func TestH2NoForceClosedStreams(t *testing.T) {
	var handled atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		f := w.(http.Flusher)
		for i := range 4 {
			fmt.Fprintf(w, "chunk %d\n", i)
			f.Flush()
			time.Sleep(time.Millisecond)
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tr := replaysafe.New(replaysafe.Options{
		Protocol:            replaysafe.ProtocolHTTP2,
		MaxIdleConnsPerHost: 1,
		TLSClientConfig:     srv.Client().Transport.(*http.Transport).TLSClientConfig,
	})
	t.Cleanup(tr.CloseIdleConnections)
	var forced, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 25 {
				ctx, cancel := context.WithCancel(t.Context())
				req := newRequest(t, ctx, "GET", fmt.Sprintf("%s/g%d/%d", srv.URL, g, i), "")
				resp, err := tr.RoundTrip(req)
				if err == nil {
					switch i % 3 {
					case 0:
						_, err = io.Copy(io.Discard, resp.Body)
					case 1:
						_, err = resp.Body.Read(make([]byte, 4)) // abandon early
					case 2:
						_, err = resp.Body.Read(make([]byte, 4))
						cancel() // the caller gives up mid-body
					}
					resp.Body.Close()
				}
				cancel()
				if err != nil {
					failed.Add(1)
					if strings.Contains(err.Error(), "force closed") {
						forced.Add(1)
						t.Logf("g%d/%d: %v", g, i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if forced.Load() != 0 || failed.Load() != 0 {
		t.Errorf("%d of 400 calls failed, %d of them force closed", failed.Load(), forced.Load())
	}
	if handled.Load() < 400 {
		t.Errorf("the server handled %d requests, want at least 400", handled.Load())
	}
}
