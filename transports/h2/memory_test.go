package h2_test

//lint:file-ignore SA1019 x/net's http2.Transport is the peer this connection is measured against; only tests use it.

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/transports/h2"
)

// swallower is an h2c server that sends its SETTINGS (1000 streams),
// acknowledges the client's, and never answers a request: it counts the
// HEADERS it reads.
type swallower struct {
	ln      net.Listener
	headers atomic.Int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func newSwallower(t *testing.T) *swallower {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &swallower{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *swallower) serve(c net.Conn) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1000})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			s.headers.Add(1)
		}
	}
}

// TestMemoryPerInflightGet measures the heap and stacks that one GET
// waiting for its response holds, here and in x/net's Transport, against
// the same server. The caller's request and goroutine are counted for
// both.
func TestMemoryPerInflightGet(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	const n = 500
	measure := func(name string, rt func(*http.Request) error) (heap, stack float64, goroutines int) {
		s := newSwallower(t)
		if rt == nil { // the caller's own share: its request and goroutine
			rt = func(req *http.Request) error {
				s.headers.Add(1)
				<-req.Context().Done()
				return nil
			}
		}
		url := "http://" + s.ln.Addr().String() + "/"
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		// One request first, so the connection and its buffers exist.
		one, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		wg.Add(1)
		go func() { defer wg.Done(); rt(one) }()
		waitCount(t, &s.headers, 1)
		settle() // what earlier tests left behind finishes
		runtime.GC()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		for range n {
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			wg.Add(1)
			go func() { defer wg.Done(); rt(req) }()
		}
		waitCount(t, &s.headers, n+1)
		runtime.GC()
		runtime.ReadMemStats(&after)
		goroutines = runtime.NumGoroutine() - g0
		cancel()
		wg.Wait()
		heap = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		stack = float64(int64(after.StackInuse)-int64(before.StackInuse)) / n
		t.Logf("%s: %.0f B heap (%.1f objects), %.0f B stack, %.2f goroutines per in-flight GET", name, heap,
			float64(int64(after.HeapObjects)-int64(before.HeapObjects))/n, stack, float64(goroutines)/n)
		return heap, stack, goroutines
	}
	baseHeap, baseStack, baseG := measure("caller alone", nil)
	var cc *h2.ClientConn
	oursHeap, _, oursG := measure("ours", func(req *http.Request) error {
		if cc == nil {
			var d net.Dialer
			c, err := d.Dial("tcp4", req.URL.Host)
			if err != nil {
				return err
			}
			cc, _ = h2.NewClientConn(c, h2.Config{PingAfter: -1})
		}
		if !cc.Reserve() {
			return nil
		}
		_, err := cc.RoundTrip(req, nil)
		return err
	})
	cc.Close()
	<-cc.Done()
	settle()
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	xnetHeap, _, xnetG := measure("x/net", func(req *http.Request) error {
		_, err := tr.RoundTrip(req)
		return err
	})
	tr.CloseIdleConnections()
	settle()
	t.Logf("net of the caller's share (%.0f B heap, %.0f B stack): ours %.0f B heap, x/net %.0f B heap", baseHeap, baseStack, oursHeap-baseHeap, xnetHeap-baseHeap)
	if oursHeap-baseHeap > 1536 || oursHeap > xnetHeap || oursG > xnetG || oursG != baseG {
		t.Errorf("ours %.0f B heap and %d goroutines per %d GETs; x/net %.0f B, %d; the caller alone %.0f B, %d",
			oursHeap, oursG, n, xnetHeap, xnetG, baseHeap, baseG)
	}
	time.Sleep(10 * time.Millisecond) // let the closed connections' goroutines finish before goleak looks
}

// settle waits (boundedly) until the number of goroutines stops changing.
func settle() {
	last, same := -1, 0
	for range 200 {
		n := runtime.NumGoroutine()
		if n == last {
			same++
			if same == 3 {
				return
			}
		} else {
			last, same = n, 0
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitCount(t *testing.T, c *atomic.Int64, n int64) {
	t.Helper()
	for range 10000 {
		if c.Load() >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("count %d, want %d", c.Load(), n)
}
