package h1_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
)

// endless1xx is a raw HTTP/1.1 server that answers the first request on
// each connection with informational responses until the client stops
// reading (at most max of them). It counts requests and responses sent.
type endless1xx struct {
	ln       net.Listener
	requests atomic.Int32
	sent     atomic.Int64
	done     chan struct{}
}

func startEndless1xx(t *testing.T, response string, max int) *endless1xx {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &endless1xx{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		s.requests.Add(1)
		b := []byte(response)
		for range max {
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(b); err != nil {
				return
			}
			s.sent.Add(1)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-s.done })
	return s
}

// An HTTP/1.1 server sending 100 or 103 forever, with small or large
// header sections, fails the attempt at the bound, not at the end of what
// the server sends: a few MiB allocated, a *informational.LimitError,
// fed as EventMalformed (the fsm fails the attempt: a response started,
// RS07).
func TestEndlessInformationalH1(t *testing.T) {
	big := strings.Repeat("x", 60<<10)
	for _, tc := range []struct {
		name, response string
		byBytes        bool
	}{
		{"103 forever", "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n", false},
		{"100 forever", "HTTP/1.1 100 Continue\r\n\r\n", false},
		{"103 with 60 KiB headers", "HTTP/1.1 103 Early Hints\r\nLink: " + big + "\r\n\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startEndless1xx(t, tc.response, 1<<20)
			rec := h1.NewRecorder(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, recorder.NewClock(), nil)
			defer rec.Stop()
			tr := &http.Transport{}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cc, err := tr.NewClientConn(ctx, "http", s.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			rec.Acquired(false)
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, rec.ClientTrace()), "GET", "http://"+s.ln.Addr().String()+"/", nil)

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
			t.Logf("%s: failed after %v, %d responses sent, %.1f MiB allocated: %v", tc.name, elapsed, s.sent.Load(), float64(alloc)/(1<<20), err)
			var le *informational.LimitError
			if !errors.As(err, &le) || !errors.Is(err, informational.ErrLimit) {
				t.Fatalf("error %v, want a *informational.LimitError", err)
			}
			if (le.Count > informational.DefaultCount) == tc.byBytes {
				t.Errorf("limit error %+v: want the %s bound", le, map[bool]string{true: "bytes", false: "count"}[tc.byBytes])
			}
			if alloc > 16<<20 {
				t.Errorf("allocated %d bytes, want within 16 MiB", alloc)
			}
			if rec.InformationalError() == nil {
				t.Error("InformationalError is nil")
			}
			if d := rec.Fail(err, ctx, nil); d.Action != fsm.ActionFail || d.Rule != fsm.RuleResponseStarted {
				t.Errorf("decision %v, want fail response-started", d)
			}
			if evs := rec.Events(); evs[len(evs)-1].Kind != fsm.EventMalformed {
				t.Errorf("last event %v, want malformed", evs[len(evs)-1])
			}
			if n := s.requests.Load(); n != 1 {
				t.Errorf("server received %d requests, want 1", n)
			}
		})
	}
}

// A caller's own bound replaces the default, and a few 1xx responses
// within it are accepted.
func TestInformationalLimitSetAndWithin(t *testing.T) {
	s := startEndless1xx(t, "HTTP/1.1 103 Early Hints\r\n\r\n", 3)
	rec := h1.NewRecorder(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, recorder.NewClock(), nil)
	defer rec.Stop()
	rec.SetInformationalLimit(informational.Limit{Count: 2})
	cc, err := (&http.Transport{}).NewClientConn(t.Context(), "http", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rec.Acquired(false)
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), rec.ClientTrace()), "GET", "http://"+s.ln.Addr().String()+"/", nil)
	_, err = cc.RoundTrip(req)
	var le *informational.LimitError
	if !errors.As(err, &le) || le.Count != 3 || le.Limit.Count != 2 {
		t.Fatalf("error %v (%+v), want the third 103 over a bound of 2", err, le)
	}
}
