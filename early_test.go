package replaysafe_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest/h3early"
)

func startEarly(t *testing.T) *h3early.Server {
	t.Helper()
	s, err := h3early.New(h3early.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// earlyClient returns an HTTP/3 Transport with EarlyData to es, its
// attempt reports, and a primed session: one request was answered on a
// first connection, whose session ticket the next connection resumes;
// that connection is then closed.
func earlyClient(t *testing.T, es *h3early.Server, o replaysafe.Options) (*replaysafe.Transport, func() []replaysafe.AttemptReport) {
	t.Helper()
	var mu sync.Mutex
	var reports []replaysafe.AttemptReport
	o.Protocol = replaysafe.ProtocolHTTP3
	o.TLSClientConfig = es.ClientTLSConfig()
	o.Observer.OnAttempt = func(r replaysafe.AttemptReport) {
		mu.Lock()
		reports = append(reports, r)
		mu.Unlock()
	}
	tr := replaysafe.New(o)
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Get(es.URL() + "/prime")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.TLS == nil || resp.TLS.DidResume {
		t.Fatalf("the priming request resumed a session: %+v", resp.TLS)
	}
	tr.CloseIdleConnections()
	mu.Lock()
	reports = nil
	mu.Unlock()
	return tr, func() []replaysafe.AttemptReport {
		mu.Lock()
		defer mu.Unlock()
		return append([]replaysafe.AttemptReport(nil), reports...)
	}
}

func earlyGet(t *testing.T, tr http.RoundTripper, req *http.Request) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	resp, err := tr.RoundTrip(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// hasEvent reports whether the attempt fed an event of kind k.
func hasEvent(r replaysafe.AttemptReport, k fsm.EventKind) bool {
	for _, e := range r.Events {
		if e.Kind == k {
			return true
		}
	}
	return false
}

func earlyAcquired(r replaysafe.AttemptReport) bool {
	return len(r.Events) > 0 && r.Events[0].Kind == fsm.EventConnAcquired && r.Events[0].Early
}

// TestEarlyDataAcceptedGET: a GET on a resumed connection goes in early
// data, which the server accepts: it processes it once, before the
// handshake completed, and the response comes on that one attempt.
func TestEarlyDataAcceptedGET(t *testing.T) {
	es := startEarly(t)
	tr, reports := earlyClient(t, es, replaysafe.Options{EarlyData: true})
	req, _ := http.NewRequest(http.MethodGet, es.URL()+"/accepted", nil)
	resp, body := earlyGet(t, tr, req)
	if resp.StatusCode != 200 || body != "ok /accepted" || !resp.TLS.DidResume || !resp.TLS.HandshakeComplete {
		t.Fatalf("status %d body %q TLS %+v", resp.StatusCode, body, resp.TLS)
	}
	got := es.Copies("/accepted")
	if len(got) != 1 || !got[0].Early {
		t.Fatalf("server got %+v, want one copy in early data", got)
	}
	rs := reports()
	if len(rs) != 1 || !earlyAcquired(rs[0]) || rs[0].Decision.Rule != fsm.RuleDeliverFinalResponse {
		t.Fatalf("attempts %+v, want one early attempt delivered", rs)
	}
	waitEvent(t, reports, fsm.EventEarlyAccepted)
}

// waitEvent waits (bounded) for the first attempt's trace to show k: the
// acceptance is fed when quic-go reports the handshake's end, which may
// be after the response.
func waitEvent(t *testing.T, reports func() []replaysafe.AttemptReport, k fsm.EventKind) {
	t.Helper()
	for range 200 {
		if rs := reports(); len(rs) > 0 && hasEvent(rs[0], k) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The report is taken at the attempt's end; an acceptance fed after it
	// is in no report. The copy count above is what the test is about.
	t.Logf("the first attempt's report shows no %v: %v", k, reports()[0].Trace)
}

// TestEarlyDataRejectedResent: the server resumes the session but rejects
// its early data: the GET it discarded is sent once more after the
// handshake (RS33), processed once, two copies on the wire at most.
func TestEarlyDataRejectedResent(t *testing.T) {
	es := startEarly(t)
	tr, reports := earlyClient(t, es, replaysafe.Options{EarlyData: true})
	es.Reject(true)
	req, _ := http.NewRequest(http.MethodGet, es.URL()+"/rejected", nil)
	resp, body := earlyGet(t, tr, req)
	if resp.StatusCode != 200 || body != "ok /rejected" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	got := es.Copies("/rejected")
	if len(got) != 1 || got[0].Early {
		t.Fatalf("server processed %+v, want one copy after the handshake", got)
	}
	rs := reports()
	if len(rs) != 2 {
		t.Fatalf("%d attempts, want 2: %+v", len(rs), rs)
	}
	if !earlyAcquired(rs[0]) || rs[0].Decision != (fsm.Decision{Action: fsm.ActionResend, Rule: fsm.RuleEarlyDataRejected, Conn: fsm.ConnDiscard}) {
		t.Errorf("attempt 1: %v\n%s", rs[0].Decision, rs[0].Trace)
	}
	if earlyAcquired(rs[1]) || rs[1].Facts.Attempt != fsm.AttemptResend || rs[1].Decision.Action != fsm.ActionDeliver {
		t.Errorf("attempt 2: %v facts %v\n%s", rs[1].Decision, rs[1].Facts, rs[1].Trace)
	}
}

// TestEarlyDataNeverPOST: a POST, even with a body the Transport can
// produce again, never goes as early data: it waits for the handshake,
// and the server gets it once, after the handshake.
func TestEarlyDataNeverPOST(t *testing.T) {
	es := startEarly(t)
	tr, reports := earlyClient(t, es, replaysafe.Options{EarlyData: true, EarlyDataKeyed: true})
	for _, c := range []struct {
		path string
		body io.Reader
		key  bool
	}{
		{"/post", strings.NewReader("payload"), false},
		{"/post-empty", nil, false},
		{"/post-keyed-body", strings.NewReader("payload"), true}, // quic-go cannot send a body early
	} {
		tr.CloseIdleConnections() // each on a new, resumed connection
		req, _ := http.NewRequest(http.MethodPost, es.URL()+c.path, c.body)
		if c.key {
			req.Header.Set("Idempotency-Key", "k1")
		}
		resp, _ := earlyGet(t, tr, req)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", c.path, resp.StatusCode)
		}
		got := es.Copies(c.path)
		if len(got) != 1 || got[0].Early {
			t.Errorf("%s: server got %+v, want one copy after the handshake", c.path, got)
		}
	}
	for _, r := range reports() {
		if earlyAcquired(r) {
			t.Errorf("a POST went as early data: %s", r.Trace)
		}
	}
}

// TestEarlyDataTooEarly: the server answers the GET in early data with
// 425; the call retries it once after the handshake (RS22), and the
// server answers that copy.
func TestEarlyDataTooEarly(t *testing.T) {
	es := startEarly(t)
	tr, reports := earlyClient(t, es, replaysafe.Options{EarlyData: true})
	es.TooEarly(true)
	req, _ := http.NewRequest(http.MethodGet, es.URL()+"/too-early", nil)
	resp, body := earlyGet(t, tr, req)
	if resp.StatusCode != 200 || body != "ok /too-early" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	got := es.Copies("/too-early")
	if len(got) != 2 || !got[0].Early || got[1].Early || got[0].Raw != got[1].Raw {
		t.Fatalf("server got %+v, want an early copy answered 425, then the same request after the handshake", got)
	}
	rs := reports()
	if len(rs) != 2 || rs[0].Status != http.StatusTooEarly || rs[0].Call.Rule != fsm.RuleTooEarly || earlyAcquired(rs[1]) {
		t.Fatalf("attempts: %+v", rs)
	}
}

// TestEarlyDataOffByDefault: without EarlyData a GET on a new connection
// waits for the handshake, and no session is resumed.
func TestEarlyDataOffByDefault(t *testing.T) {
	es := startEarly(t)
	tr, reports := earlyClient(t, es, replaysafe.Options{})
	req, _ := http.NewRequest(http.MethodGet, es.URL()+"/off", nil)
	resp, _ := earlyGet(t, tr, req)
	if got := es.Copies("/off"); len(got) != 1 || got[0].Early || resp.TLS.DidResume {
		t.Fatalf("server got %+v, resumed %v", got, resp.TLS.DidResume)
	}
	if rs := reports(); len(rs) != 1 || earlyAcquired(rs[0]) {
		t.Fatalf("attempts %+v", rs)
	}
}

// TestEarlyDataConnectionReused: a connection dialed for early data is
// pooled as any other once its handshake completes: without a ticket (the
// first connection) and after its early data was accepted, the next
// request takes it.
func TestEarlyDataConnectionReused(t *testing.T) {
	es := startEarly(t)
	tr, reports := earlyClient(t, es, replaysafe.Options{EarlyData: true})
	for _, p := range []string{"/a", "/b"} {
		req, _ := http.NewRequest(http.MethodGet, es.URL()+p, nil)
		earlyGet(t, tr, req)
	}
	rs := reports()
	if len(rs) != 2 || !earlyAcquired(rs[0]) || earlyAcquired(rs[1]) || !rs[1].Reused {
		t.Fatalf("attempts %+v, want an early one, then one reusing its connection", rs)
	}
	if got := es.Copies("/a"); len(got) != 1 || !got[0].Early {
		t.Errorf("/a: %+v", got)
	}
	if got := es.Copies("/b"); len(got) != 1 || got[0].Early || got[0].Conn != es.Copies("/a")[0].Conn {
		t.Errorf("/b: %+v, want it after the handshake on /a's connection", got)
	}
	if n := es.Accepted(); n != 2 { // the priming one, and the resumed one
		t.Errorf("the server accepted %d connections, want 2", n)
	}
	// Without a ticket DialEarly completes the handshake first: that
	// connection is pooled too.
	var second []replaysafe.AttemptReport
	fresh := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP3, TLSClientConfig: es.ClientTLSConfig(), EarlyData: true,
		Observer: replaysafe.Observer{OnAttempt: func(r replaysafe.AttemptReport) { second = append(second, r) }}})
	defer fresh.CloseIdleConnections()
	for _, p := range []string{"/c", "/d"} {
		req, _ := http.NewRequest(http.MethodGet, es.URL()+p, nil)
		earlyGet(t, fresh, req)
	}
	if len(second) != 2 || earlyAcquired(second[0]) || !second[1].Reused {
		t.Fatalf("attempts without a ticket %+v, want a fresh connection, then reused", second)
	}
}
