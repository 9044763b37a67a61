package replaysafe_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
)

// h1Copies is an HTTP/1.1 origin that records every copy of every
// request it receives (method and body, by path) and answers as a
// restart test needs: the warm-up requests once all of them arrived (so
// that each has a connection of its own), the first copy of any other
// request never (it waits until its connection dies), a later copy at
// once.
type h1Copies struct {
	warm  int
	mu    sync.Mutex
	got   map[string][]string // path → "METHOD body" of each copy
	ready chan struct{}       // closed when the warm-up requests all arrived
	warms atomic.Int32
}

func (o *h1Copies) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	o.mu.Lock()
	o.got[r.URL.Path] = append(o.got[r.URL.Path], r.Method+" "+string(body))
	n := len(o.got[r.URL.Path])
	o.mu.Unlock()
	switch {
	case strings.HasPrefix(r.URL.Path, "/w"):
		if int(o.warms.Add(1)) == o.warm {
			close(o.ready)
		}
		select {
		case <-o.ready:
		case <-time.After(10 * time.Second):
		}
	case strings.HasPrefix(r.URL.Path, "/n"): // a new request: answered at once
	case n == 1:
		<-r.Context().Done() // held until its connection dies
		return
	}
	io.WriteString(w, "ok")
}

func (o *h1Copies) copies(path string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got[path]...)
}

func (o *h1Copies) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.got {
		n += len(c)
	}
	return n
}

// TestRestartH1ResendsWaitForTheRoute: an HTTP/1.1 server restarts with
// 64 requests in flight (48 GETs, 16 POSTs), each on a reused
// connection of its own: every connection dies with a reset and the port
// refuses for 100 ms. The GETs' resends (RS20) find the port refusing;
// a refused dial sent nothing, so they wait for the route, one probing
// at a time with spaced dials, instead of failing with RS04, and each
// then dials its own connection: every GET arrives twice, byte for
// byte, and succeeds; no POST arrives twice (RS18); the restart costs
// one new connection per resent GET. A new GET made while the port
// still refuses waits for it too (the restart window) and arrives once
// (choice 23).
func TestRestartH1ResendsWaitForTheRoute(t *testing.T) {
	const gets, posts = 48, 16
	const n = gets + posts
	origin := &h1Copies{warm: n, got: map[string][]string{}, ready: make(chan struct{})}
	srv := httptest.NewServer(origin)
	defer srv.Close()
	front := newRestartFront(t, strings.TrimPrefix(srv.URL, "http://"))
	base := "http://" + front.addr
	var dials, refused atomic.Int64
	tr := replaysafe.New(replaysafe.Options{IgnoreProxyEnvironment: true, MaxIdleConnsPerHost: n,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				refused.Add(1)
			}
			return c, err
		}})
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// n connections, pooled.
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if code, _, err := roundTrip(tr, newRequest(t, ctx, "GET", fmt.Sprintf("%s/w%d", base, i), "")); err != nil || code != 200 {
				t.Errorf("warm-up %d: %d %v", i, code, err)
			}
		})
	}
	wg.Wait()
	if a := front.Accepted(); a != n {
		t.Fatalf("%d connections after the warm-up, want %d", a, n)
	}

	wait := inFlight(t, ctx, tr, base, gets, posts) // its own /warm, answered at once, then the n
	for origin.count() < 2*n+1 {                    // n warm-ups, /warm, then n first copies
		if ctx.Err() != nil {
			t.Fatalf("%d requests arrived, want %d", origin.count(), 2*n+1)
		}
		time.Sleep(time.Millisecond)
	}
	if a := front.Accepted(); a != n {
		t.Fatalf("%d connections before the restart, want %d: every request in flight on a reused one", a, n)
	}
	dialsBefore := dials.Load()
	front.kill()
	for refused.Load() == 0 { // a resend found the port refusing
		if ctx.Err() != nil {
			t.Fatal("no dial was refused after the restart")
		}
		time.Sleep(time.Millisecond)
	}
	var fresh inFlightResult
	wg.Go(func() {
		fresh.code, fresh.body, fresh.err = roundTrip(tr, newRequest(t, ctx, "GET", base+"/new", ""))
	})
	time.Sleep(100 * time.Millisecond) // the port refuses meanwhile
	front.listen(t)
	results := wait()
	wg.Wait()
	if fresh.err != nil || fresh.code != 200 || len(origin.copies("/new")) != 1 {
		t.Errorf("a new GET during the restart: %d %v, %d copies; want 200 and one copy", fresh.code, fresh.err, len(origin.copies("/new")))
	}

	getsOK, postTwice := 0, 0
	for i := range gets {
		path := fmt.Sprintf("/g%d", i)
		cs := origin.copies(path)
		if len(cs) != 2 || cs[0] != cs[1] {
			t.Errorf("%s: copies %q, want 2 identical", path, cs)
		}
		if r := results[i]; r.err == nil && r.code == 200 && r.body == "ok" {
			getsOK++
		} else if i < 3 {
			t.Logf("%s: %d %q %v", path, r.code, r.body, r.err)
		}
	}
	for i := range posts {
		if cs := origin.copies(fmt.Sprintf("/p%d", i)); len(cs) != 1 {
			postTwice++
			t.Errorf("/p%d arrived %d times, want once", i, len(cs))
		}
		var e *replaysafe.Error
		if r := results[gets+i]; r.err == nil || !errors.As(r.err, &e) {
			t.Errorf("/p%d: %d %v, want a replaysafe error", i, r.code, r.err)
		}
	}
	newConns := front.Accepted() - n - 1 // the new GET's own
	t.Logf("after the restart: %d dials, %d refused; %d new connections; GETs succeeded %d/%d; POSTs delivered twice %d/%d",
		dials.Load()-dialsBefore, refused.Load(), newConns, getsOK, gets, postTwice, posts)
	if getsOK != gets {
		t.Errorf("%d of %d GETs succeeded", getsOK, gets)
	}
	if newConns != gets {
		t.Errorf("%d new connections after the restart, want %d: one per resent GET", newConns, gets)
	}
}
