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
