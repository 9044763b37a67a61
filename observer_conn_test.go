package replaysafe_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// connLog records OnConn and OnAttemptStart.
type connLog struct {
	mu     sync.Mutex
	events []replaysafe.ConnEvent
	starts []replaysafe.AttemptStart
}

func (l *connLog) observer() replaysafe.Observer {
	return replaysafe.Observer{
		OnConn:         func(e replaysafe.ConnEvent) { l.mu.Lock(); l.events = append(l.events, e); l.mu.Unlock() },
		OnAttemptStart: func(s replaysafe.AttemptStart) { l.mu.Lock(); l.starts = append(l.starts, s); l.mu.Unlock() },
	}
}

// count returns how many events of kind (and reason, for a close) came.
func (l *connLog) count(kind replaysafe.ConnEventKind, reason replaysafe.ConnCloseReason) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Kind == kind && (kind != replaysafe.ConnClosed || reason == 0 || e.Reason == reason) {
			n++
		}
	}
	return n
}

// waitClosed waits until n closes were reported: HTTP/2 closes in the
// background.
func (l *connLog) waitClosed(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.count(replaysafe.ConnClosed, 0) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := l.count(replaysafe.ConnClosed, 0); got != n {
		t.Fatalf("%d closes reported, want %d: %+v", got, n, l.events)
	}
}

// TestObserverConnEvents: a stale HTTP/1.1 connection crossing a GET is
// discarded and the resend dials; every connection reported dialed is
// reported closed once, the idle one by CloseIdleConnections; the
// attempts' starts are reported with their numbers and facts.
func TestObserverConnEvents(t *testing.T) {
	s := start(t, crossing(replaysafetest.CloseFIN))
	var l connLog
	tr := replaysafe.New(replaysafe.Options{Observer: l.observer()})
	defer tr.CloseIdleConnections()
	get(t, tr, s, "/warm")
	get(t, tr, s, "/target")
	if d, r := l.count(replaysafe.ConnDialed, 0), l.count(replaysafe.ConnReused, 0); d != 2 || r != 1 {
		t.Errorf("%d dialed, %d reused; want 2 and 1: %+v", d, r, l.events)
	}
	if n := l.count(replaysafe.ConnClosed, replaysafe.ConnCloseDiscarded); n != 1 {
		t.Errorf("%d discarded, want the stale connection: %+v", n, l.events)
	}
	tr.CloseIdleConnections()
	l.waitClosed(t, 2)
	if n := l.count(replaysafe.ConnClosed, replaysafe.ConnCloseIdle); n != 1 {
		t.Errorf("%d closed idle, want 1: %+v", n, l.events)
	}
	for _, e := range l.events {
		if e.Addr != s.Addr() || e.Proto != fsm.ProtoH1 {
			t.Errorf("event %+v, want %s over h1", e, s.Addr())
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.starts) != 3 || l.starts[1].Number != 1 || l.starts[2].Number != 2 || l.starts[2].Facts.Attempt != fsm.AttemptResend ||
		l.starts[2].Request.URL.Path != "/target" {
		t.Errorf("attempt starts %+v, want /warm's, then /target's 1 and its resend 2", l.starts)
	}
}

// TestObserverConnEventsH2: an HTTP/2 connection is dialed once, reused
// by the second request, and closed idle by CloseIdleConnections.
func TestObserverConnEventsH2(t *testing.T) {
	s := startH2(t, h2server.Config{Default: h2server.Every(h2server.OK("ok"))})
	var l connLog
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2, TLSClientConfig: s.ClientTLSConfig(), Observer: l.observer()})
	defer tr.CloseIdleConnections()
	for range 2 {
		code, _, err := roundTrip(tr, newRequest(t, t.Context(), http.MethodGet, s.URL()+"/x", ""))
		if err != nil || code != 200 {
			t.Fatalf("%d %v", code, err)
		}
	}
	if d, r := l.count(replaysafe.ConnDialed, 0), l.count(replaysafe.ConnReused, 0); d != 1 || r != 1 {
		t.Errorf("%d dialed, %d reused; want 1 and 1: %+v", d, r, l.events)
	}
	tr.CloseIdleConnections()
	l.waitClosed(t, 1)
	if n := l.count(replaysafe.ConnClosed, replaysafe.ConnCloseIdle); n != 1 || l.events[0].Proto != fsm.ProtoH2 {
		t.Errorf("events %+v, want an h2 connection closed idle", l.events)
	}
}

func TestConnEventNames(t *testing.T) {
	if s := replaysafe.ConnClosed.String() + " " + replaysafe.ConnCloseGoAway.String() + " " + replaysafe.ConnEventKind(9).String() + " " + replaysafe.ConnCloseReason(9).String(); s != "closed goaway ConnEventKind(9) ConnCloseReason(9)" {
		t.Errorf("names: %s", s)
	}
}

// TestObserverConnEventsGoAway: a connection whose server sent GOAWAY is
// reported closed for it, over HTTP/2 and HTTP/3; the resend's new
// connection is reported dialed, and closed idle by
// CloseIdleConnections.
func TestObserverConnEventsGoAway(t *testing.T) {
	check := func(t *testing.T, l *connLog, tr *replaysafe.Transport, proto fsm.Proto) {
		t.Helper()
		if d := l.count(replaysafe.ConnDialed, 0); d != 2 {
			t.Errorf("%d dialed, want 2: %+v", d, l.events)
		}
		tr.CloseIdleConnections()
		l.waitClosed(t, 2)
		if g, i := l.count(replaysafe.ConnClosed, replaysafe.ConnCloseGoAway), l.count(replaysafe.ConnClosed, replaysafe.ConnCloseIdle); g != 1 || i != 1 {
			t.Errorf("%d closed for GOAWAY, %d idle; want 1 and 1: %+v", g, i, l.events)
		}
		for _, e := range l.events {
			if e.Proto != proto {
				t.Errorf("event %+v, want %v", e, proto)
			}
		}
	}
	t.Run("h2", func(t *testing.T) {
		s := startH2(t, h2Script([]h2server.Action{h2server.OK("ok"), h2server.GoAwayBelow()}))
		var l connLog
		tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2, TLSClientConfig: s.ClientTLSConfig(), Observer: l.observer()})
		defer tr.CloseIdleConnections()
		for _, path := range []string{"/warm", "/g"} {
			if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+path, "")); err != nil || code != 200 {
				t.Fatalf("GET %s: %d %v", path, code, err)
			}
		}
		wantH2Copies(t, s, "/g", 0, 1)
		check(t, &l, tr, fsm.ProtoH2)
	})
	t.Run("h3", func(t *testing.T) {
		s := startH3(t, h3Script([]h3server.Action{h3server.OK("first"), h3server.GoAwayRejecting().WithClose()}))
		var l connLog
		tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP3, TLSClientConfig: s.ClientTLSConfig(), Observer: l.observer()})
		defer tr.CloseIdleConnections()
		for _, path := range []string{"/warm", "/g"} {
			if code, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+path, "")); err != nil || code != 200 {
				t.Fatalf("GET %s: %d %v", path, code, err)
			}
		}
		wantH3Copies(t, s, "/g", 0, 1)
		check(t, &l, tr, fsm.ProtoH3)
	})
}

// TestAttemptReportStatus: an attempt's report carries the status it
// received, the retried 503 too; an attempt that got none reports 0.
func TestAttemptReportStatus(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(
		replaysafetest.Respond(503, "busy"), replaysafetest.OK())}})
	tr, obs := client(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	get(t, tr, s, "/r")
	as := obs.attemptsFor("/r")
	if len(as) != 2 || as[0].Status != 503 || as[1].Status != 200 {
		t.Fatalf("reports %+v, want statuses 503 then 200", as)
	}

	c := start(t, crossing(replaysafetest.CloseFIN))
	tr, obs = client(t, c, replaysafe.Options{})
	get(t, tr, c, "/warm")
	get(t, tr, c, "/target")
	if as := obs.attemptsFor("/target"); len(as) != 2 || as[0].Status != 0 || as[1].Status != 200 {
		t.Fatalf("reports %+v, want statuses 0 (the close) then 200", as)
	}
}
