package replaysafe_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// Hedging (Retry.Hedge; fsm.Call.Hedge, rules hedge, hedge-refused and
// hedge-copy-failed): each test counts what the server received. A
// stalled copy hangs until the client closes its connection, so how many
// copies go out does not depend on how fast the machine is: a hedge is
// sent for every stalled copy, and none after a copy answers.

// hedgeDelay is short, so that the tests run quickly; no assertion reads
// the time.
const hedgeDelay = 10 * time.Millisecond

// hedgeStarts records the attempts that began, as OnAttemptStart saw
// them.
type hedgeStarts struct {
	mu     sync.Mutex
	starts []replaysafe.AttemptStart
}

func (h *hedgeStarts) hedges() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.starts {
		if s.Hedge {
			n++
		}
	}
	return n
}

// hedgeClient is client with the hedging policy r and a record of the
// attempts that began.
func hedgeClient(t *testing.T, s *replaysafetest.Server, o replaysafe.Options) (*replaysafe.Transport, *observed, *hedgeStarts) {
	t.Helper()
	hs := &hedgeStarts{}
	tr, obs := client(t, s, o)
	// client sets the Observer: a second Transport with the same options
	// and the start hook too.
	o.TLSClientConfig = s.ClientTLSConfig()
	o.Observer = obs.observer()
	o.Observer.OnAttemptStart = func(a replaysafe.AttemptStart) {
		hs.mu.Lock()
		hs.starts = append(hs.starts, a)
		hs.mu.Unlock()
	}
	tr.CloseIdleConnections()
	tr = replaysafe.New(o)
	t.Cleanup(tr.CloseIdleConnections)
	return tr, obs, hs
}

// sameCopies checks that the server received exactly n copies of the
// request to path, byte for byte the same.
func sameCopies(t *testing.T, s *replaysafetest.Server, path string, n int) []replaysafetest.Received {
	t.Helper()
	var got []replaysafetest.Received
	for _, r := range s.Requests() {
		if r.Target == path {
			got = append(got, r)
		}
	}
	if len(got) != n {
		t.Fatalf("the server received %d copies of %s, want %d", len(got), path, n)
	}
	for _, r := range got[1:] {
		if !bytes.Equal(r.Raw, got[0].Raw) {
			t.Errorf("copies differ:\n%q\n%q", got[0].Raw, r.Raw)
		}
	}
	return got
}

// waitClosed waits until the server saw connection i closed: the losing
// copy's connection, which the client closes.
func waitClosed(t *testing.T, s *replaysafetest.Server, i int) {
	t.Helper()
	if err := s.WaitConnClosed(t.Context(), i); err != nil {
		t.Fatal(err)
	}
}

func TestHedgeGET(t *testing.T) {
	for _, c := range []struct {
		name     string
		max      int
		attempts int
		stalls   int // connections that stall before one answers
	}{
		{"one hedge wins", 1, 3, 1},
		{"the second hedge wins", 2, 3, 2},
		{"MaxAttempts bounds the hedges", 5, 3, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var conns []replaysafetest.ConnScript
			for range c.stalls {
				conns = append(conns, replaysafetest.Script(replaysafetest.Hang(0)))
			}
			conns = append(conns, replaysafetest.Script(replaysafetest.OK()))
			s := start(t, replaysafetest.Config{Conns: conns})
			tr, obs, hs := hedgeClient(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: c.attempts, Hedge: hedgeDelay, MaxHedges: c.max}})
			get(t, tr, s, "/h")
			copies := sameCopies(t, s, "/h", c.stalls+1)
			if winner := copies[len(copies)-1].Conn; winner != c.stalls {
				t.Errorf("the answer came on connection %d, want %d", winner, c.stalls)
			}
			if got := hs.hedges(); got != c.stalls {
				t.Errorf("%d attempts started as hedges, want %d", got, c.stalls)
			}
			for i := range c.stalls {
				waitClosed(t, s, i) // the losers' connections are closed, not pooled
			}
			// Every copy is reported: the winner delivered, each loser
			// counted beside it.
			delivered, lost := 0, 0
			for _, a := range waitAttempts(t, obs, "/h", c.stalls+1) {
				switch a.Call.Rule {
				case fsm.RuleDeliverFinalResponse:
					delivered++
				case fsm.RuleHedgeCopyFailed:
					lost++
				}
			}
			if delivered != 1 || lost != c.stalls {
				t.Errorf("%d copies delivered and %d lost, want 1 and %d", delivered, lost, c.stalls)
			}
		})
	}
}

func TestHedgeNeedsASafeCopy(t *testing.T) {
	for _, c := range []struct {
		name   string
		method string
		body   string
		key    bool
		keyed  bool
		copies int
	}{
		{"POST without a key is never hedged", "POST", "order=1", false, true, 1},
		{"a keyed POST without keyed hedges", "POST", "order=1", true, false, 1},
		{"a keyed POST with keyed hedges", "POST", "order=1", true, true, 2},
		{"a one-shot body is never hedged", "PUT", "oneshot:order=1", false, false, 1},
		{"a PUT with a buffered body", "PUT", "order=1", false, false, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The first connection answers late, a second at once: a
			// hedge, if one goes, wins.
			s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
				replaysafetest.Script(replaysafetest.Respond(200, "late").WithDelay(300 * time.Millisecond)),
				replaysafetest.Script(replaysafetest.OK()),
			}})
			tr, _, hs := hedgeClient(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 3,
				Hedge: hedgeDelay, MaxHedges: 2, HedgeKeyed: c.keyed}})
			var hdr []string
			if c.key {
				hdr = []string{"Idempotency-Key", "k-1"}
			}
			code, body, err := roundTrip(tr, newRequest(t, t.Context(), c.method, s.URL()+"/w", c.body, hdr...))
			want := map[int]string{1: "late", 2: "ok"}[c.copies]
			if err != nil || code != 200 || body != want {
				t.Fatalf("%d %q %v, want 200 %q", code, body, err, want)
			}
			sameCopies(t, s, "/w", c.copies)
			if hs.hedges() != c.copies-1 {
				t.Errorf("%d hedges started, want %d", hs.hedges(), c.copies-1)
			}
			if c.copies == 2 {
				waitClosed(t, s, 0) // the late copy's connection, closed unread
			}
		})
	}
}

// TestHedgeRefusedInHistory: a POST without a key under a hedging policy
// whose only copy fails: the error's history starts with the refused
// hedge, and one copy reached the server.
func TestHedgeRefusedInHistory(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.Hang(100 * time.Millisecond)),
	}})
	tr, _, hs := hedgeClient(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 3, Hedge: hedgeDelay, MaxHedges: 2, HedgeKeyed: true}})
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "POST", s.URL()+"/w", "order=1"))
	var re *replaysafe.Error
	if !errors.As(err, &re) {
		t.Fatalf("want a *replaysafe.Error, got %v", err)
	}
	sameCopies(t, s, "/w", 1)
	want := []fsm.CallDecision{{Action: fsm.ActionContinue, Rule: fsm.RuleHedgeRefused}, {Action: fsm.ActionFail, Rule: fsm.RuleAmbiguousFreshConn}}
	if !slices.Equal(re.History, want) || hs.hedges() != 0 || re.Attempts != 1 {
		t.Errorf("history %v after %d attempts and %d hedges, want %v after 1 and none", re.History, re.Attempts, hs.hedges(), want)
	}
}

// TestHedgeOffByDefault: a policy without Hedge sends one copy of a
// stalling GET.
func TestHedgeOffByDefault(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.Respond(200, "ok").WithDelay(100 * time.Millisecond)),
	}})
	tr, _, hs := hedgeClient(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 3}})
	get(t, tr, s, "/d")
	sameCopies(t, s, "/d", 1)
	if hs.hedges() != 0 {
		t.Errorf("%d hedges started", hs.hedges())
	}
}

// TestHedgeBudget: hedges draw on the route's retry budget, and stop
// when it is spent. Ten quick calls give a budget of 10% of the route's
// calls room for one hedge; the next stalled call is hedged, the one
// after it is not.
func TestHedgeBudget(t *testing.T) {
	var conns []replaysafetest.ConnScript
	for range 10 {
		conns = append(conns, replaysafetest.Script(replaysafetest.OK()))
	}
	conns = append(conns,
		replaysafetest.Script(replaysafetest.Hang(0)),                    // call A's first copy
		replaysafetest.Script(replaysafetest.OK()),                       // call A's hedge
		replaysafetest.Script(replaysafetest.Hang(300*time.Millisecond))) // call B's only copy
	s := start(t, replaysafetest.Config{Conns: conns})
	tr, _, hs := hedgeClient(t, s, replaysafe.Options{DisableKeepAlives: true, Retry: replaysafe.Retry{MaxAttempts: 3, Statuses: []int{},
		Budget: replaysafe.RetryBudget{Ratio: 0.1, MinPerSecond: -1, Window: time.Minute},
		Hedge:  hedgeDelay, MaxHedges: 2}})
	for range 10 {
		get(t, tr, s, "/quick")
	}
	get(t, tr, s, "/a")
	sameCopies(t, s, "/a", 2)
	_, _, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/b", ""))
	var re *replaysafe.Error
	if !errors.As(err, &re) {
		t.Fatalf("call B: want a *replaysafe.Error, got %v", err)
	}
	sameCopies(t, s, "/b", 1)
	if hs.hedges() != 1 {
		t.Errorf("%d hedges started, want call A's one", hs.hedges())
	}
	if re.Rule != fsm.RuleRetryBudget || !slices.ContainsFunc(re.History, func(d fsm.CallDecision) bool { return d.Rule == fsm.RuleHedgeRefused }) {
		t.Errorf("call B ended by %v with history %v; want the budget to refuse its hedge and its retry", re.Rule, re.History)
	}
}

// TestHedgeCopyFailsBeside: the first copy's connection fails while the
// hedge is in flight; the call waits for the hedge, and makes no resend
// of the failed copy.
func TestHedgeCopyFailsBeside(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.Hang(50 * time.Millisecond)),                          // fails under the hedge
		replaysafetest.Script(replaysafetest.Respond(200, "ok").WithDelay(200 * time.Millisecond)), // the hedge, slow
	}})
	tr, obs, _ := hedgeClient(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 3, Hedge: hedgeDelay, MaxHedges: 1}})
	get(t, tr, s, "/f")
	sameCopies(t, s, "/f", 2)
	as := obs.attemptsFor("/f")
	if len(as) != 2 || as[0].Call.Rule != fsm.RuleHedgeCopyFailed || as[1].Call.Rule != fsm.RuleDeliverFinalResponse || !as[1].Hedge {
		for _, a := range as {
			t.Logf("attempt %d hedge=%v: %v", a.Number, a.Hedge, a.Call)
		}
		t.Fatalf("want the first copy to fail beside the hedge, and the hedge to deliver")
	}
}

// TestHedgeLoserBodyClosed: a hedge of a PUT with a GetBody body; the
// loser's body copy is closed once it lost.
func TestHedgeLoserBodyClosed(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.Hang(0)),
		replaysafetest.Script(replaysafetest.OK()),
	}})
	tr, _, _ := hedgeClient(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 2, Hedge: hedgeDelay}})
	var mu sync.Mutex
	var bodies []*closeCount
	req := newRequest(t, t.Context(), "PUT", s.URL()+"/p", "")
	req.ContentLength = 5
	mk := func() *closeCount {
		b := &closeCount{r: bytes.NewReader([]byte("hello"))}
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		return b
	}
	req.Body = mk()
	req.GetBody = func() (io.ReadCloser, error) { return mk(), nil }
	code, _, err := roundTrip(tr, req)
	if err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	sameCopies(t, s, "/p", 2)
	allClosed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range bodies {
			if b.closes() == 0 {
				return false
			}
		}
		return true
	}
	for i := 0; i < 1000 && !allClosed(); i++ { // the loser closes its body once its stack let go of it
		time.Sleep(5 * time.Millisecond)
	}
	if !allClosed() {
		mu.Lock()
		for i, b := range bodies {
			t.Logf("body %d: closed %d times", i, b.closes())
		}
		mu.Unlock()
		t.Fatal("a copy's body was never closed")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 2 {
		t.Errorf("%d bodies made, want the caller's and one GetBody copy", len(bodies))
	}
	for i, b := range bodies {
		if n := b.closes(); n != 1 {
			t.Errorf("body %d closed %d times", i, n)
		}
	}
}

// closeCount is a request body that counts its Close calls.
type closeCount struct {
	r *bytes.Reader
	n atomic.Int32
}

func (c *closeCount) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *closeCount) Close() error               { c.n.Add(1); return nil }
func (c *closeCount) closes() int                { return int(c.n.Load()) }

// TestHedgeH2AnotherConnection: over HTTP/2 the hedge goes on a new
// connection, though the stalled copy's connection has room for more
// streams: a copy never shares a connection with another copy, whose
// trouble it would share too. The stalled copy, the loser, is canceled:
// the client resets its stream.
func TestHedgeH2AnotherConnection(t *testing.T) {
	forTLSAndH2C(t, func(t *testing.T, useTLS bool) {
		cfg := h2Script(
			[]h2server.Action{h2server.OK("warm"), h2server.Hang(5 * time.Second)},
			[]h2server.Action{h2server.OK("ok")},
		)
		cfg.TLS = useTLS
		s := startH2(t, cfg)
		tr, obs := h2Client(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 2, Hedge: hedgeDelay}})
		warmThenHedged(t, tr, s.URL())
		wantH2Copies(t, s, "/h", 0, 1)
		cs := h2Copies(s, "/h")
		if !slices.Equal(cs[0].Fields, cs[1].Fields) || !bytes.Equal(cs[0].Body, cs[1].Body) {
			t.Errorf("copies differ: %v %q / %v %q", cs[0].Fields, cs[0].Body, cs[1].Fields, cs[1].Body)
		}
		as := waitAttempts(t, obs, "/h", 2)
		reset := false
		for i := 0; i < 1000 && !reset; i++ { // the reset is written on the connection's own goroutine
			if reset = h2Copies(s, "/h")[0].ClientReset; !reset {
				time.Sleep(5 * time.Millisecond)
			}
		}
		if !reset {
			t.Errorf("the losing copy's stream was not reset: %+v", h2Copies(s, "/h")[0])
		}
		slices.SortFunc(as, func(x, y replaysafe.AttemptReport) int { return x.Number - y.Number })
		if !as[0].Reused || as[0].Hedge || as[1].Reused || !as[1].Hedge {
			t.Errorf("the first copy reused %v hedge %v, the second reused %v hedge %v; want a pooled first copy and a hedge on a new connection",
				as[0].Reused, as[0].Hedge, as[1].Reused, as[1].Hedge)
		}
	})
}

// warmThenHedged pools a connection with an unhedged GET of /warm, then
// makes the hedged GET of /h, which must deliver "ok".
func warmThenHedged(t *testing.T, tr *replaysafe.Transport, base string) {
	t.Helper()
	// The warm-up itself is not hedged: a handshake slower than the
	// hedge delay (the race detector on a busy machine) would otherwise
	// let the warm-up's hedge dial a connection of its own, canceled
	// when the warm-up answers, and the hedged GET's connection would
	// not be the server's second.
	unhedged := replaysafe.WithRetry(t.Context(), replaysafe.Retry{MaxAttempts: 2})
	code, body, err := roundTrip(tr, newRequest(t, unhedged, "GET", base+"/warm", ""))
	if err != nil || code != 200 || body != "warm" {
		t.Fatalf("warm-up: %d %q %v", code, body, err)
	}
	code, body, err = roundTrip(tr, newRequest(t, t.Context(), "GET", base+"/h", ""))
	if err != nil || code != 200 || body != "ok" {
		t.Fatalf("hedged: %d %q %v", code, body, err)
	}
}

// waitAttempts waits, a bounded while, until the Observer has the
// reports of n attempts for path (a losing copy reports once its stack
// let go of it, after the call returned) and returns them.
func waitAttempts(t *testing.T, obs *observed, path string, n int) []replaysafe.AttemptReport {
	t.Helper()
	for range 1000 {
		if as := obs.attemptsFor(path); len(as) >= n {
			return as
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d attempt reports for %s after 5s, want %d", len(obs.attemptsFor(path)), path, n)
	return nil
}

// TestHedgeStopsAtMax: with a delay far shorter than the stall, a call
// sends Max hedges and then waits, however many delays pass: the hedge
// answers late, and the server received two copies.
func TestHedgeStopsAtMax(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
		replaysafetest.Script(replaysafetest.Hang(0)),
		replaysafetest.Script(replaysafetest.Respond(200, "late").WithDelay(200 * time.Millisecond)),
	}})
	tr, _, hs := hedgeClient(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 5, Hedge: time.Millisecond, MaxHedges: 1}})
	code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", s.URL()+"/m", ""))
	if err != nil || code != 200 || body != "late" {
		t.Fatalf("%d %q %v", code, body, err)
	}
	sameCopies(t, s, "/m", 2)
	if hs.hedges() != 1 {
		t.Errorf("%d hedges, want 1", hs.hedges())
	}
}

// TestHedgeH3AnotherConnection: over HTTP/3, as over HTTP/2, the hedge
// goes on a new QUIC connection beside the stalled copy's, the server
// receives two identical copies, and the loser is canceled by the
// client: its report comes while the server still holds it (a GET's
// stream has its FIN, so the server, which reads no more, cannot see the
// client stop it).
func TestHedgeH3AnotherConnection(t *testing.T) {
	s := startH3(t, h3Script(
		[]h3server.Action{h3server.OK("warm"), h3server.Hang(time.Minute)},
		[]h3server.Action{h3server.OK("ok")},
	))
	tr, obs := h3Client(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 2, Hedge: hedgeDelay}})
	warmThenHedged(t, tr, s.URL())
	wantH3Copies(t, s, "/h", 0, 1)
	as := waitAttempts(t, obs, "/h", 2) // within 5 s: the hang lasts a minute
	slices.SortFunc(as, func(x, y replaysafe.AttemptReport) int { return x.Number - y.Number })
	if !as[0].Reused || as[0].Hedge || as[0].Decision.Rule != fsm.RuleCanceled || as[0].Call.Rule != fsm.RuleHedgeCopyFailed ||
		as[1].Reused || !as[1].Hedge || as[1].Call.Rule != fsm.RuleDeliverFinalResponse {
		t.Errorf("first copy reused %v hedge %v %v / %v, second reused %v hedge %v %v; want a pooled first copy canceled as the loser and a hedge on a new connection that delivered",
			as[0].Reused, as[0].Hedge, as[0].Decision, as[0].Call, as[1].Reused, as[1].Hedge, as[1].Call)
	}
}
