package driver

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/internal/dial"
	"github.com/replaysafe/replaysafe/internal/pool"
)

// TestIdleTimerLetsGoOfClosedConnections: a connection's idle timer holds
// it through an idleRef that closing empties. The runtime keeps a stopped
// timer until it next cleans its timer heap, and a timer that was not
// stopped until it fires; neither may keep a closed connection, with its
// buffers, reachable.
func TestIdleTimerLetsGoOfClosedConnections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	tr := New(Config{IdleConnTimeout: time.Hour, MaxIdleConnsPerHost: 2, Dial: dial.Config{DialContext: (&net.Dialer{}).DialContext}})
	defer tr.CloseIdle()

	resp, err := roundTrip(t, tr, httptest.NewRequest("GET", srv.URL+"/", nil).WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	u, _ := url.Parse(srv.URL)
	pc, ok := tr.h1pool.Get(pool.Key{Scheme: "http", Addr: u.Host, Host: u.Hostname(), Route: routeKey(t, tr, srv.URL)})
	if !ok {
		t.Fatal("no idle connection after a clean exchange")
	}
	tr.h1pool.Put(pc) // back, with its idle timer set
	held := pc.idle.Held()
	if held != pc {
		t.Fatalf("idle connection: its timer holds %v", held)
	}
	tr.CloseIdle()
	if got := pc.idle.Held(); got != nil {
		t.Errorf("closed connection still held by its idle timer: %v", got)
	}
}

// TestIdleTimerRunsAcrossKeepAlive: over HTTP/1.1 a GET that takes the
// pooled connection stops its idle timer, and its return sets it for a
// whole limit again. Four GETs 600 ms apart under a 1 s limit share one
// connection, which closes 1 s after the last. Fake time
// (testing/synctest) over net.Pipe; the server counts connections and
// requests.
func TestIdleTimerRunsAcrossKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dials, requests, closed atomic.Int32
		serve := func(c net.Conn) {
			defer closed.Add(1)
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				requests.Add(1)
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
					return
				}
			}
		}
		tr := New(Config{IdleConnTimeout: time.Second, MaxIdleConnsPerHost: 2, Dial: dial.Config{DialContext: func(context.Context, string, string) (net.Conn, error) {
			dials.Add(1)
			client, server := net.Pipe()
			go serve(server)
			return client, nil
		}}})
		defer tr.CloseIdle()
		get := func() {
			t.Helper()
			req, err := http.NewRequestWithContext(t.Context(), "GET", "http://pipe.test/", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := roundTrip(t, tr, req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != "ok" {
				t.Fatalf("body %q, %v", b, err)
			}
		}
		for i := range 4 {
			if i > 0 {
				time.Sleep(600 * time.Millisecond)
			}
			get()
		}
		synctest.Wait()
		if d, r := dials.Load(), requests.Load(); d != 1 || r != 4 {
			t.Fatalf("%d connections for %d requests, want 1 for 4", d, r)
		}
		time.Sleep(950 * time.Millisecond)
		synctest.Wait()
		if closed.Load() != 0 {
			t.Fatal("closed 950 ms after its last exchange, under a 1 s limit")
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if closed.Load() != 1 {
			t.Fatal("still open 1.05 s after its last exchange, under a 1 s limit")
		}
		if n := tr.IdleConns(); n != 0 {
			t.Errorf("%d idle connections after the idle close", n)
		}
	})
}

// roundTrip runs req as one call without retries, as the face does.
func roundTrip(t *testing.T, tr *Transport, req *http.Request) (*http.Response, error) {
	t.Helper()
	c, err := tr.Start(req, nil)
	if err != nil {
		return nil, err
	}
	return c.Run()
}

// routeKey returns the route key of an HTTP/1.1 call to rawURL, direct.
func routeKey(t *testing.T, tr *Transport, rawURL string) route.Key {
	t.Helper()
	req, _ := http.NewRequest("GET", rawURL, nil)
	key, err := validate(req)
	if err != nil {
		t.Fatal(err)
	}
	k, _, err := tr.dial.Direct(key, route.PolicyH1)
	if err != nil {
		t.Fatal(err)
	}
	return k.Route
}
