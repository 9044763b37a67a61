package h2_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/replaysafe/replaysafe/adapters/h2"
	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/fsm"
	conn "github.com/replaysafe/replaysafe/transports/h2"
)

// raw1xxServer is a raw HTTP/2 (prior knowledge) server written with
// x/net's Framer: it answers the first request with HEADERS frames
// carrying an informational status, up to max of them, until the client
// resets the stream or goes away. It counts the requests it received and
// the 1xx frames it sent.
type raw1xxServer struct {
	ln       net.Listener
	requests atomic.Int32
	sent     atomic.Int64
	reset    atomic.Bool // the client reset the stream
	done     chan struct{}
}

func startRaw1xx(t *testing.T, status string, extra []hpack.HeaderField, max int) *raw1xxServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &raw1xxServer{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(c, preface); err != nil {
			return
		}
		fr := http2.NewFramer(c, c)
		if err := fr.WriteSettings(); err != nil {
			return
		}
		stream := make(chan uint32, 1)
		go func() { // the read side: settings, the request, a reset
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					return
				}
				switch f := f.(type) {
				case *http2.SettingsFrame:
					if !f.IsAck() {
						fr.WriteSettingsAck() // before the 1xx loop writes: no race on fr
					}
				case *http2.HeadersFrame:
					s.requests.Add(1)
					select {
					case stream <- f.StreamID:
					default:
					}
				case *http2.RSTStreamFrame:
					s.reset.Store(true)
				}
			}
		}()
		var id uint32
		select {
		case id = <-stream:
		case <-time.After(5 * time.Second):
			return
		}
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		enc.WriteField(hpack.HeaderField{Name: ":status", Value: status})
		for _, f := range extra {
			enc.WriteField(f)
		}
		for range max {
			if s.reset.Load() {
				return
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
				return
			}
			s.sent.Add(1)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-s.done })
	return s
}

// An HTTP/2 server sending 100 or 103 forever fails the request at the
// bound: the stream is reset, the error is a *StreamError whose cause is
// the *informational.LimitError, fed as EventMalformed, within 16 MiB of
// allocation; the server received the request once. The connection's own
// bound on interim responses is raised above the adapter's, so that the
// adapter's decides.
func TestEndlessInformationalH2(t *testing.T) {
	big := []hpack.HeaderField{{Name: "link", Value: strings.Repeat("x", 12<<10)}}
	for _, tc := range []struct {
		name    string
		status  string
		extra   []hpack.HeaderField
		byBytes bool
		lim     informational.Limit
	}{
		{"103 forever", "103", []hpack.HeaderField{{Name: "link", Value: "</style.css>; rel=preload"}}, false, informational.Limit{}},
		{"100 forever", "100", nil, false, informational.Limit{}},
		// One HEADERS frame holds at most 16 KiB without CONTINUATION,
		// so 33 of them stay under the 1 MiB default: a smaller byte
		// bound shows the byte count at work.
		{"103 with 12 KiB headers", "103", big, true, informational.Limit{Bytes: 200 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startRaw1xx(t, tc.status, tc.extra, 1<<20)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			nc, err := net.Dial("tcp", s.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			cc, err := conn.NewClientConn(nc, conn.Config{MaxInformational: 4 * informational.DefaultCount})
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			m := fsm.New(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, 0)
			m.Step(fsm.Event{Kind: fsm.EventConnAcquired, Proto: fsm.ProtoH2})
			var mu sync.Mutex
			var emitted []fsm.Event
			var att h2.Attempt
			att.Init(h2.EmitFunc(func(e fsm.Event) {
				mu.Lock()
				emitted = append(emitted, e)
				mu.Unlock()
			}))
			att.SetInformationalLimit(tc.lim)
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.ln.Addr().String()+"/", nil)

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			cc.Reserve()
			resp, err := cc.RoundTrip(req, &att)
			runtime.ReadMemStats(&after)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("round trip succeeded with %d", resp.StatusCode)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: %d responses sent, %.1f MiB allocated: %v", tc.name, s.sent.Load(), float64(alloc)/(1<<20), err)
			var se *conn.StreamError
			var le *informational.LimitError
			if !errors.As(err, &se) || se.Remote || !errors.As(err, &le) {
				t.Fatalf("error %v, want our StreamError caused by a LimitError", err)
			}
			if (le.Count > informational.DefaultCount) == tc.byBytes {
				t.Errorf("limit error %+v: wrong bound", le)
			}
			if !errors.Is(att.InformationalError(), informational.ErrLimit) {
				t.Errorf("InformationalError %v", att.InformationalError())
			}
			if alloc > 16<<20 {
				t.Errorf("allocated %d bytes, want within 16 MiB", alloc)
			}
			ev := att.Failure(ctx, err)
			if ev.Kind != fsm.EventMalformed {
				t.Errorf("Failure = %v, want malformed", ev)
			}
			mu.Lock()
			for _, e := range emitted {
				m.Step(e)
			}
			mu.Unlock()
			if d := m.Step(ev); d.Action != fsm.ActionFail {
				t.Errorf("decision %v, want fail", d)
			}
			if n := s.requests.Load(); n != 1 {
				t.Errorf("server received %d requests, want 1", n)
			}
		})
	}
}
