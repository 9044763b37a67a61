package interop

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
)

// The tally counts deliveries, errors and copies per request id, and the
// safety bounds catch a third copy and a second POST.
func TestResultTallies(t *testing.T) {
	runs := []run{
		{wall: 2 * time.Millisecond, conns: 1, requests: []request{
			{id: "a", method: http.MethodGet, status: 200, protoMajor: 3},
			{id: "b", method: http.MethodPost, err: errors.New("broken pipe")},
		}},
		{wall: 4 * time.Millisecond, conns: 2, requests: []request{
			{id: "c", method: http.MethodPut, status: 200},
			{id: "d", method: http.MethodPost, status: 503},
		}},
	}
	r := result("row", Replaysafe, runs, map[string]int{"a": 1, "c": 2, "d": 1}, map[string]int{"a": 1}, 3)
	want := Result{Row: "row", Client: Replaysafe, Runs: 2, Requests: 4, Delivered: 2, Errors: 2,
		Copies: 4, MaxCopies: 2, Lost: 1, Conns: 3, ConnsPerRun: []int{1, 2}, Resends: -1, Crossed: -1, H3: 1, H3Runs: 1, ServerH3: 1,
		Wall: 3 * time.Millisecond, FirstErr: "broken pipe"}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("tally\n got %+v\nwant %+v", r, want)
	}
	if u := r.Unsafe(); u != "" {
		t.Fatalf("two copies of a PUT judged unsafe: %s", u)
	}
	if u := result("row", NetHTTP, runs, map[string]int{"a": 3, "d": 2}, nil, 0).Unsafe(); u != "a request was received 3 times; 1 POST requests were received twice" {
		t.Fatalf("unsafe = %q", u)
	}
	peer := Result{ConnsPerRun: []int{1, 1}}
	if m := moreConnsThan(r, peer); m != "run 1: 2 > 1" {
		t.Errorf("moreConnsThan = %q", m)
	}
	if m := moreConnsThan(peer, r); m != "" {
		t.Errorf("moreConnsThan, fewer = %q", m)
	}
}

// Request ids come out of both access log formats, with the protocol;
// requests without one are not counted.
func TestAccessLogIDs(t *testing.T) {
	dir := t.TempDir()
	nginx := filepath.Join(dir, "nginx.log")
	if err := os.WriteFile(nginx, []byte("r.1.0 GET 200 HTTP/2.0 7\n- GET 200 HTTP/1.1 8\nr.1.0 POST 200 HTTP/2.0 9\nr.2.1 PUT 200 HTTP/1.1 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	caddy := filepath.Join(dir, "caddy.log")
	if err := os.WriteFile(caddy, []byte(`{"level":"info","request":{"proto":"HTTP/3.0","headers":{"X-Request-Id":["r.1.0"]}}}`+"\n"+
		`{"level":"info","request":{"proto":"HTTP/2.0","headers":{"User-Agent":["x"]}}}`+"\nnot json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		l     *logFile
		proto string
		want  map[string]int
	}{
		{&logFile{path: nginx, parse: nginxID}, "", map[string]int{"r.1.0": 2, "r.2.1": 1}},
		{&logFile{path: nginx, parse: nginxID}, "HTTP/2.0", map[string]int{"r.1.0": 2}},
		{&logFile{path: nginx, parse: nginxID}, logH3, map[string]int{}},
		{&logFile{path: caddy, parse: caddyID}, "", map[string]int{"r.1.0": 1}},
		{&logFile{path: caddy, parse: caddyID}, logH3, map[string]int{"r.1.0": 1}},
		{&logFile{path: filepath.Join(dir, "absent.log"), parse: nginxID}, "", map[string]int{}},
	} {
		got, err := c.l.counts(c.proto)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(c.want) {
			t.Fatalf("%s: %v, want %v", c.l.path, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Fatalf("%s: %v, want %v", c.l.path, got, c.want)
			}
		}
	}
}

// The idle-crossing offsets sweep from -spread to +spread: run n waits
// at the fraction sweep(n) of the interval, each new batch between the
// offsets already tried. Fake time (testing/synctest): the waits are
// exact.
func TestCrossingSweep(t *testing.T) {
	var want []time.Duration
	for _, us := range []time.Duration{10_000, 20_000, 15_000, 25_000, 12_500, 22_500, 17_500, 27_500} {
		want = append(want, us*time.Microsecond)
	}
	synctest.Test(t, func(t *testing.T) {
		for n, w := range want {
			start := time.Now()
			e := &runEnv{t: &target{url: "http://127.0.0.1:1"}, c: &client{rt: failing{}}, n: n, prefix: "x"}
			crossing(http.MethodGet, 20*time.Millisecond, 10*time.Millisecond)(t.Context(), e)
			if got := time.Since(start); got != w {
				t.Errorf("run %d waited %v, want %v", n, got, w)
			}
		}
	})
	seen := map[float64]bool{}
	for n := range 64 {
		f := sweep(n)
		if f < 0 || f >= 1 || seen[f] {
			t.Fatalf("sweep(%d) = %v: out of [0, 1) or repeated", n, f)
		}
		seen[f] = true
	}
}

// TestCloseEdgesFollowTheClose: a crossing row's window of offsets
// closes in on the server's close from both sides, and one pushed
// against an end grows that way (a close later than the timeout by more
// than the spread, as on a loaded machine).
func TestCloseEdgesFollowTheClose(t *testing.T) {
	ms := time.Millisecond
	c := &closeEdges{spread: 5 * ms, by: map[string]*closeEdge{}}
	if got := c.offset("rs", 0); got != -5*ms {
		t.Fatalf("first offset %v, want -5ms", got)
	}
	c.learn("rs", -1*ms, true)
	c.learn("rs", 3*ms, false)
	if e := c.by["rs"]; e.lo != -1*ms || e.hi != 3*ms {
		t.Fatalf("window [%v, %v], want [-1ms, 3ms]", e.lo, e.hi)
	}
	if o := c.offset("rs", 1); o != ms {
		t.Errorf("offset in the middle of [-1ms, 3ms]: %v, want 1ms", o)
	}
	c.learn("rs", 3*ms-minEdge/2, true) // early just below hi: look later
	if e := c.by["rs"]; e.lo != 3*ms-minEdge/2 || e.hi != e.lo+5*ms {
		t.Errorf("window after an early run at its top: [%v, %v]", e.lo, e.hi)
	}
	if e := c.edge("peer"); e.lo != -5*ms || e.hi != 5*ms {
		t.Errorf("another client's window [%v, %v], want its own [-5ms, 5ms]", e.lo, e.hi)
	}
}

type failing struct{}

func (failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, errors.New("no server") }

// Bad flags exit 2 before any server starts.
func TestMainFlags(t *testing.T) {
	for _, args := range [][]string{{"-runs", "0"}, {"-case", "("}, {"-server", "apache"}, {"extra", "-nope"}} {
		var out, errOut strings.Builder
		if code := Main(args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
}

// A row shows its point or fails: a crossing and a resend are
// replaysafe's (a peer does not tell, and is not judged), HTTP/3 is every
// client's, at the client and in the server's log.
func TestPointMissing(t *testing.T) {
	rs := Result{Client: Replaysafe, Runs: 4, Requests: 24, Delivered: 24, Resends: 0, Crossed: 0, H3: 24, H3Runs: 4, ServerH3: 24}
	peer := rs
	peer.Client, peer.Resends, peer.Crossed = QuicGo, -1, -1
	with := func(r Result, f func(*Result)) Result { f(&r); return r }
	for _, c := range []struct {
		p    Point
		r    Result
		want string // a substring of the complaint; "" for none
	}{
		{ShowsNothing, rs, ""},
		{ShowsCrossing, rs, "no request crossed"},
		{ShowsCrossing, with(rs, func(r *Result) { r.Crossed = 1 }), ""},
		{ShowsCrossing, peer, ""},
		{ShowsResend, rs, "no request was resent"},
		{ShowsResend, with(rs, func(r *Result) { r.Resends = 2 }), ""},
		{ShowsHTTP3, rs, ""},
		{ShowsHTTP3, peer, ""},
		{ShowsHTTP3, with(rs, func(r *Result) { r.H3 = 23 }), "23 of 24 responses"},
		{ShowsHTTP3, with(peer, func(r *Result) { r.H3, r.ServerH3 = 0, 0 }), "0 of 24 responses"},
		{ShowsHTTP3, with(rs, func(r *Result) { r.ServerH3 = 0 }), "the server logged 0 copies over HTTP/3"},
		{ShowsHTTP3, with(rs, func(r *Result) { r.ServerH3 = 20 }), "the server logged 20"},
		{ShowsHTTP3, with(rs, func(r *Result) { r.Requests, r.Delivered, r.H3, r.ServerH3 = 2, 0, 0, 0 }), "0 of 0"},
		{ShowsDiscovery, with(rs, func(r *Result) { r.H3, r.ServerH3 = 20, 20 }), ""},
		{ShowsDiscovery, with(rs, func(r *Result) { r.H3Runs = 3 }), "3 of 4 runs"},
		{ShowsDiscovery, with(rs, func(r *Result) { r.H3, r.H3Runs, r.ServerH3 = 0, 0, 0 }), "0 of 4 runs"},
	} {
		got := c.p.Missing(c.r)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%v, %+v: %q, want %q", c.p, c.r, got, c.want)
		}
	}
}

// An attempt crossed the server's close when it wrote on a reused
// connection that failed before a response byte; a close seen before the
// write, a fresh connection or a response that started is no crossing.
func TestCrossedClose(t *testing.T) {
	ev := func(kinds ...fsm.EventKind) []fsm.Event {
		var out []fsm.Event
		for _, k := range kinds {
			out = append(out, fsm.Event{Kind: k})
		}
		return out
	}
	for _, c := range []struct {
		name   string
		reused bool
		events []fsm.Event
		want   bool
	}{
		{"written, then closed", true, ev(fsm.EventConnAcquired, fsm.EventFirstByteWritten, fsm.EventRequestWritten, fsm.EventClosed), true},
		{"written, then reset", true, ev(fsm.EventConnAcquired, fsm.EventFirstByteWritten, fsm.EventReset), true},
		{"written, then GOAWAY", true, ev(fsm.EventConnAcquired, fsm.EventFirstByteWritten, fsm.EventH2GoAway), true},
		{"fresh connection", false, ev(fsm.EventConnAcquired, fsm.EventFirstByteWritten, fsm.EventClosed), false},
		{"closed before the write", true, ev(fsm.EventConnAcquired, fsm.EventClosed), false},
		{"handed back", true, ev(fsm.EventConnAcquired, fsm.EventHandedBack), false},
		{"a response started", true, ev(fsm.EventConnAcquired, fsm.EventFirstByteWritten, fsm.EventFirstResponseByte, fsm.EventClosed), false},
		{"delivered", true, ev(fsm.EventConnAcquired, fsm.EventFirstByteWritten, fsm.EventFinalHeaders, fsm.EventResponseComplete), false},
		{"refused stream", true, ev(fsm.EventConnAcquired, fsm.EventFirstByteWritten, fsm.EventRefusedStream), false},
	} {
		if got := crossedClose(replaysafe.AttemptReport{Reused: c.reused, Events: c.events}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Every row that exists to show a crossing, a resend or HTTP/3 says so:
// the crossing rows, the GOAWAY and refusal rows, and every caddy row.
func TestRowsSayWhatTheyShow(t *testing.T) {
	for _, r := range Rows() {
		var want Point
		switch {
		case strings.Contains(r.ID, "idle-1s/") || strings.Contains(r.ID, "keepalive-1s/"):
			want = ShowsCrossing
		case strings.HasPrefix(r.ID, "nginx-h2-requests-10/") || strings.HasPrefix(r.ID, "nginx-h2c-requests-10/") || strings.HasPrefix(r.ID, "nginx-h2-preread"):
			want = ShowsResend
		case r.ID == "caddy-h3/discover-http3":
			want = ShowsDiscovery
		case r.Server == "caddy":
			want = ShowsHTTP3
		}
		if r.Shows != want {
			t.Errorf("%s shows %v, want %v", r.ID, r.Shows, want)
		}
	}
}
