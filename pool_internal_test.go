package replaysafe

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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
	tr := New(Options{IdleConnTimeout: time.Hour})
	defer tr.CloseIdleConnections()

	resp, err := tr.RoundTrip(httptest.NewRequest("GET", srv.URL+"/", nil).WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	tr.pool.mu.Lock()
	var pc *persistConn
	for _, list := range tr.pool.idle {
		pc = list[0]
	}
	tr.pool.mu.Unlock()
	if pc == nil {
		t.Fatal("no idle connection after a clean exchange")
	}
	if pc.idleTimer == nil || pc.idleRef.get() != pc {
		t.Fatalf("idle connection: timer %v, its ref holds %v", pc.idleTimer, pc.idleRef.get())
	}
	tr.CloseIdleConnections()
	if got := pc.idleRef.get(); got != nil {
		t.Errorf("closed connection still held by its idle timer: %v", got)
	}
	if pc.idleTimer.Stop() {
		t.Error("closed connection's idle timer was still running")
	}
}

// TestMuxIdleTimerLetsGoOfShutConnections is the same for the HTTP/2 and
// HTTP/3 pool: shut stops the idle timer and empties its idleRef.
func TestMuxIdleTimerLetsGoOfShutConnections(t *testing.T) {
	p := newMuxPool[*fakeMuxConn](2, time.Hour, newConnLimit(0))
	c := &fakeMuxConn{}
	p.add(c)
	p.done(c, true) // idle: the timer starts
	m := c.mux()
	if m.idleTimer == nil || m.idleRef.get() != c {
		t.Fatalf("idle connection: timer %v, its ref holds %v", m.idleTimer, m.idleRef.get())
	}
	p.retire(c) // idle, so it is shut at once
	if !c.closed {
		t.Fatal("a retired idle connection was not closed")
	}
	if got := m.idleRef.get(); got != nil {
		t.Errorf("shut connection still held by its idle timer: %v", got)
	}
	if m.idleTimer.Stop() {
		t.Error("shut connection's idle timer was still running")
	}
}

// fakeMuxConn is a muxConn that takes any number of streams.
type fakeMuxConn struct {
	state  muxState
	closed bool
}

func (c *fakeMuxConn) mux() *muxState { return &c.state }
func (c *fakeMuxConn) reserve() bool  { return !c.closed }
func (c *fakeMuxConn) pending() bool  { return false }
func (c *fakeMuxConn) gone() bool     { return c.closed }
func (c *fakeMuxConn) close()         { c.closed = true }
