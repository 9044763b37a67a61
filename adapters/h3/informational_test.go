package h3_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/adapters/h3"
	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/selfsigned"
)

// An HTTP/3 server sending 100 or 103 forever: quic-go's client stops at
// its own cap of 5 informational responses (the hook cannot stop it), the
// request fails within 16 MiB, and the Attempt says why
// (InformationalError) and feeds EventMalformed.
func TestEndlessInformationalH3(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		link   string
	}{
		{"103 forever", http.StatusEarlyHints, "</style.css>; rel=preload"},
		{"100 forever", http.StatusContinue, ""},
		{"103 with 60 KiB headers", http.StatusEarlyHints, strings.Repeat("x", 60<<10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert, leaf, err := selfsigned.New("informational test")
			if err != nil {
				t.Fatal(err)
			}
			ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{http3.NextProtoH3}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var requests atomic.Int32
			var sent atomic.Int64
			srv := &http3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				if tc.link != "" {
					w.Header().Set("Link", tc.link)
				}
				for range 1 << 16 {
					if r.Context().Err() != nil {
						return
					}
					w.WriteHeader(tc.status)
					sent.Add(1)
				}
			})}
			var wg sync.WaitGroup
			wg.Go(func() { srv.ServeListener(ln) })
			defer func() { srv.Close(); ln.Close(); wg.Wait() }()

			pool := x509.NewCertPool()
			pool.AddCert(leaf)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			w := h3.NewWatch()
			qc, err := quic.DialAddr(ctx, ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{http3.NextProtoH3}}, &quic.Config{Tracer: w.Tracer})
			if err != nil {
				t.Fatal(err)
			}
			defer qc.CloseWithError(0, "")
			cc := (&http3.Transport{}).NewClientConn(qc)

			var mu sync.Mutex
			var emitted []fsm.Event
			att := w.NewAttempt()
			rctx := httptrace.WithClientTrace(ctx, att.Trace(h3.EmitFunc(func(e fsm.Event) {
				mu.Lock()
				emitted = append(emitted, e)
				mu.Unlock()
			}), nil))
			req, _ := http.NewRequestWithContext(rctx, "GET", "https://"+ln.Addr().String()+"/", nil)

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			resp, err := cc.RoundTrip(req)
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("round trip succeeded with %d", resp.StatusCode)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: failed after %v, %d responses written, %.1f MiB allocated: %v", tc.name, elapsed, sent.Load(), float64(alloc)/(1<<20), err)
			var le *informational.LimitError
			if ie := att.InformationalError(); !errors.As(ie, &le) || le.Limit.Count != 5 {
				t.Fatalf("InformationalError %v, want quic-go's cap of 5", ie)
			}
			if alloc > 16<<20 {
				t.Errorf("allocated %d bytes, want within 16 MiB", alloc)
			}
			ev := att.Failure(rctx, err)
			if ev.Kind != fsm.EventMalformed {
				t.Errorf("Failure = %v, want malformed", ev)
			}
			m := fsm.New(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, 0)
			m.Step(fsm.Event{Kind: fsm.EventConnAcquired, Proto: fsm.ProtoH3})
			mu.Lock()
			for _, e := range emitted {
				m.Step(e)
			}
			mu.Unlock()
			if d := m.Step(ev); d.Action != fsm.ActionFail {
				t.Errorf("decision %v, want fail", d)
			}
			if n := requests.Load(); n != 1 {
				t.Errorf("server received %d requests, want 1", n)
			}
			att.Done()
		})
	}
}
