package soak

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
)

// TestProdFaultsDeterministic: the prod model's draws are a function of
// the seed, the request id and the copy (request faults) and of the seed
// and the connection's accept order (connection ends): the same seed
// makes the same faults, another seed others.
func TestProdFaultsDeterministic(t *testing.T) {
	differ := 0
	for i := range 2000 {
		id := strconv.Itoa(i)
		for copyNo := 1; copyNo <= 2; copyNo++ {
			f1, d1 := prodRequestFault(testSeed, 0.2, id, copyNo)
			f2, d2 := prodRequestFault(testSeed, 0.2, id, copyNo)
			if f1 != f2 || d1 != d2 {
				t.Fatalf("request %s copy %d: %v %v, then %v %v", id, copyNo, f1, d1, f2, d2)
			}
			if f3, _ := prodRequestFault(testSeed+1, 0.2, id, copyNo); f3 != f1 {
				differ++
			}
		}
		p1 := prodConnPlan(testSeed, uint64(i), 500, "h2")
		if p2 := prodConnPlan(testSeed, uint64(i), 500, "h2"); p1 != p2 {
			t.Fatalf("connection %d: %+v, then %+v", i, p1, p2)
		}
	}
	if differ == 0 {
		t.Errorf("seeds %d and %d drew the same request faults", testSeed, testSeed+1)
	}
}

// TestProdFaultsDistribution: at rate 0.05 about 5% of copies draw a
// fault, the seven request faults about equally, delays 1–20 ms; the
// connection lives 500 requests on average, ends half graceful and half
// abrupt (FIN and RST alike, within 20 ms), and over HTTP/1.1 the
// graceful ends split between "Connection: close" and an idle close.
func TestProdFaultsDistribution(t *testing.T) {
	const draws = 200000
	kinds := map[Fault]int{}
	faulted := 0
	for i := range draws {
		f, d := prodRequestFault(testSeed, 0.05, strconv.Itoa(i), 1)
		if f == FaultNone {
			continue
		}
		faulted++
		kinds[f]++
		if f == FaultDelay && (d < time.Millisecond || d > 20*time.Millisecond) {
			t.Fatalf("delay %v outside 1–20 ms", d)
		}
	}
	if rate := float64(faulted) / draws; math.Abs(rate-0.05) > 0.003 {
		t.Errorf("fault rate %.4f, want 0.05 ± 0.003", rate)
	}
	for _, f := range prodRequestFaults {
		share := float64(kinds[f]) / float64(faulted)
		if math.Abs(share-1.0/7) > 0.015 {
			t.Errorf("%v: %.3f of the faults, want 1/7 ± 0.015", f, share)
		}
	}
	if len(kinds) != len(prodRequestFaults) {
		t.Errorf("faults drawn %v, want only %v", kinds, prodRequestFaults)
	}
	if f, _ := prodRequestFault(testSeed, 0, "1", 1); f != FaultNone {
		t.Errorf("rate 0 drew %v", f)
	}

	for _, proto := range []string{"h1", "h2"} {
		const conns = 40000
		var sum int64
		ends := map[Fault]int{}
		for n := range uint64(conns) {
			p := prodConnPlan(testSeed, n, 500, proto)
			if p.life < 1 {
				t.Fatalf("%s connection %d: life %d", proto, n, p.life)
			}
			if p.after < 0 || p.after >= abruptWindow {
				t.Fatalf("%s connection %d: abrupt end after %v", proto, n, p.after)
			}
			sum += p.life
			ends[p.end]++
		}
		if mean := float64(sum) / conns; math.Abs(mean-500) > 15 {
			t.Errorf("%s: mean life %.1f requests, want 500 ± 15", proto, mean)
		}
		graceful := ends[FaultGoAway] + ends[FaultIdleFIN]
		if share := float64(graceful) / conns; math.Abs(share-0.5) > 0.02 {
			t.Errorf("%s: %.3f graceful ends, want 0.5 ± 0.02 (%v)", proto, share, ends)
		}
		if share := float64(ends[FaultAbruptFIN]) / conns; math.Abs(share-0.25) > 0.02 {
			t.Errorf("%s: %.3f abrupt FIN ends, want 0.25 ± 0.02", proto, share)
		}
		if proto == "h2" && ends[FaultIdleFIN] != 0 {
			t.Errorf("h2: %d idle closes, want GOAWAY for every graceful end", ends[FaultIdleFIN])
		}
		if proto == "h1" && math.Abs(float64(ends[FaultIdleFIN])/conns-0.25) > 0.02 {
			t.Errorf("h1: %d idle closes of %d, want a quarter", ends[FaultIdleFIN], conns)
		}
	}
	if p := prodConnPlan(testSeed, 1, -1, "h2"); p.life != 0 {
		t.Errorf("mean life -1: life %d, want 0 (never ends)", p.life)
	}
}

// ledger returns a server with only its record of requests, for the
// accounting tests.
func ledger() *server { return &server{seen: map[string]*delivery{}} }

// TestJudgeFromServerRecord: the accounting judges each failed call by
// the server's record of its copies: a copy a response byte of which
// left before it died makes the call cut, whatever the client's error
// says; a call refused by RS17 (or RS05, RS06, RS19) is set apart; a
// 503 delivered by a client that does not wait for its Retry-After (no
// retry policy, or one whose MaxRetryAfter is shorter) is set apart, by
// one that waits it counts;
// anything else (RS04, RS18, a 425 left unretried) counts against.
func TestJudgeFromServerRecord(t *testing.T) {
	s := ledger()
	// Request 1: copy 1 answered 425 (a whole answer, not started), copy
	// 2 cut after its header left.
	c := s.arrive("1", http.MethodGet, nil, FaultTooEarly)
	s.record("1", c, "", false)
	c = s.arrive("1", http.MethodGet, nil, FaultCutMidResponse)
	s.record("1", c, "d", false)
	s.setStarted("1", c, true)
	// Request 2: one copy, no response byte left.
	c = s.arrive("2", http.MethodGet, nil, FaultNone)
	s.record("2", c, "d", false)

	rs := func(r fsm.Rule) error { return &replaysafe.Error{Rule: r, Attempts: 1, Err: io.EOF} }
	cases := []struct {
		name  string
		c     callResult
		id    string
		peer  bool
		waits bool // the client waits for a 503's Retry-After and retries it
		want  Outcome
	}{
		{"ok", callResult{ok: true, status: 200}, "2", false, false, OutcomeOK},
		{"started copy, client saw a body error", callResult{err: io.ErrUnexpectedEOF}, "1", false, false, OutcomeCut},
		{"started copy, client saw RS18", callResult{err: rs(fsm.RuleAmbiguousNotIdempotent)}, "1", false, false, OutcomeCut},
		{"RS17 without a started copy", callResult{err: rs(fsm.RuleAmbiguousFreshConn)}, "2", false, false, OutcomeRefused},
		{"RS06", callResult{err: rs(fsm.RuleTimeout)}, "2", false, false, OutcomeRefused},
		{"RS05", callResult{err: rs(fsm.RuleCanceled)}, "2", false, false, OutcomeRefused},
		{"RS19", callResult{err: rs(fsm.RuleAmbiguousBodyNotReproducible)}, "2", false, false, OutcomeRefused},
		{"RS04", callResult{err: rs(fsm.RuleAcquireFailed)}, "2", false, false, OutcomeFailed},
		{"RS18", callResult{err: rs(fsm.RuleAmbiguousNotIdempotent)}, "2", false, false, OutcomeFailed},
		{"RS08", callResult{err: rs(fsm.RuleNoSecondResend)}, "2", false, false, OutcomeFailed},
		{"503 without policy", callResult{status: 503}, "2", false, false, OutcomeRetryAfter},
		{"503 with a policy", callResult{status: 503}, "2", false, true, OutcomeFailed},
		{"425 delivered", callResult{status: 425}, "2", true, false, OutcomeFailed},
		{"peer timeout", callResult{err: context.DeadlineExceeded}, "2", true, false, OutcomeRefused},
		{"peer, copy on a fresh connection", callResult{err: io.EOF}, "2", true, false, OutcomeRefused},
		{"peer, started copy", callResult{err: io.EOF}, "1", true, false, OutcomeCut},
	}
	for _, tc := range cases {
		if got := judge(tc.c, s.copiesOf(tc.id), tc.peer, tc.waits); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}

	// The peer's failure on a copy that arrived on a connection that had
	// completed a response (reused) counts against it.
	sc := &sconn{}
	sc.completed.Store(1)
	s.arrive("3", http.MethodGet, sc, FaultNone)
	if got := judge(callResult{err: io.EOF}, s.copiesOf("3"), true, false); got != OutcomeFailed {
		t.Errorf("peer failure on a reused connection: %v, want failed", got)
	}

	// The tally: idempotent success over the recoverable calls only.
	r := Result{Methods: map[string]*MethodStats{}}
	for _, m := range Methods {
		r.Methods[m] = &MethodStats{}
	}
	r.Methods[http.MethodGet] = &MethodStats{Calls: 1000, OK: 950, Cut: 30, Refused: 10, RetryAfter: 9}
	if got, want := r.RecoverableIdempotentRate(), 950.0/951; got != want {
		t.Errorf("recoverable rate %v, want %v", got, want)
	}
	if f := r.Idempotent().Failed(); f != 1 {
		t.Errorf("failed %d, want 1", f)
	}
}

// TestExitStatus: 1 only on a broken hard bound, whatever the targets
// say; 2 when the run did not complete.
func TestExitStatus(t *testing.T) {
	held := Result{MaxCopies: 2, Settled: true, Methods: map[string]*MethodStats{http.MethodGet: {Calls: 100, OK: 1}}}
	if got := exitStatus(&held, nil); got != 0 {
		t.Errorf("bounds held, targets missed: exit %d, want 0", got)
	}
	for name, r := range map[string]Result{
		"three copies":   {MaxCopies: 3, Settled: true},
		"duplicate POST": {MaxCopies: 2, DuplicateNonIdempotent: 1, Settled: true},
		"differing":      {MaxCopies: 2, Differing: 1, Settled: true},
		"tracecheck":     {MaxCopies: 1, TraceErr: errors.New("bad trace"), Settled: true},
		"resources":      {MaxCopies: 1},
	} {
		if got := exitStatus(&r, nil); got != 1 {
			t.Errorf("%s: exit %d, want 1", name, got)
		}
	}
	retry := Result{MaxCopies: 3, Settled: true, Config: Config{Retry: 3}}
	if got := exitStatus(&retry, nil); got != 0 {
		t.Errorf("three copies under -retry 3: exit %d, want 0", got)
	}
	if got := exitStatus(&held, context.Canceled); got != 2 {
		t.Errorf("interrupted: exit %d, want 2", got)
	}

	var out, errb bytes.Buffer
	if code := Main([]string{"-h"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "Exit status: 1 only when a hard bound breaks") {
		t.Errorf("-h: exit %d, stderr %q", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	code := Main([]string{"-proto", "h2c", "-n", "200", "-c", "8", "-seed", "3"}, &out, &errb)
	first, _, _ := strings.Cut(out.String(), "\n")
	if code != 0 || !strings.HasPrefix(first, "soak -proto h2c -model prod (default):") ||
		!strings.Contains(out.String(), "targets of -model prod") {
		t.Errorf("short prod run: exit %d, first line %q\n%s\n%s", code, first, out.String(), errb.String())
	}
}

// TestClassNormalised: stream numbers (single digits included),
// addresses and ports do not split an error class; rule IDs and status
// words stay.
func TestClassNormalised(t *testing.T) {
	same := [][]string{
		{"h2: stream 5 reset with CANCEL by the server", "h2: stream 1234 reset with CANCEL by the server"},
		{"stream error: stream ID 3; INTERNAL_ERROR", "stream error: stream ID 77; INTERNAL_ERROR"},
		{"read tcp 127.0.0.1:4242->127.0.0.1:80: read: connection reset by peer", "read tcp 127.0.0.1:9->127.0.0.1:31337: read: connection reset by peer"},
		{"dial tcp [::1]:8443: connect: connection refused", "dial tcp [::1]:1: connect: connection refused"},
	}
	for _, p := range same {
		if a, b := trim(p[0]), trim(p[1]); a != b {
			t.Errorf("%q and %q: classes %q and %q, want one", p[0], p[1], a, b)
		}
	}
	if got := classify(fmt.Errorf("x: %w", &replaysafe.Error{Rule: fsm.RuleAmbiguousFreshConn, Attempts: 1, Err: io.EOF})); !strings.HasPrefix(got, "RS17 ambiguous-fresh-conn") {
		t.Errorf("class %q, want the rule ID kept", got)
	}
}

// writeRecorder is a net.Conn that records what is written.
type writeRecorder struct {
	net.Conn
	buf bytes.Buffer
}

func (w *writeRecorder) Write(p []byte) (int, error) { return w.buf.Write(p) }

// TestH2WriterRewritesResetCode: the HTTP/2 server's RST_STREAM
// INTERNAL_ERROR on a stream asked for is rewritten to the code asked
// for, however the writes split the frames; other frames pass unchanged
// and a watched stream's HEADERS frame is reported.
func TestH2WriterRewritesResetCode(t *testing.T) {
	var frames bytes.Buffer
	fr := http2.NewFramer(&frames, nil)
	_ = fr.WriteSettings()
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0x88}, EndHeaders: true})
	_ = fr.WriteData(3, false, []byte("half a body"))
	_ = fr.WriteRSTStream(3, http2.ErrCodeInternal)
	_ = fr.WriteRSTStream(5, http2.ErrCodeInternal)
	raw := frames.Bytes()
	for _, chunk := range []int{1, 4, 7, 13, len(raw)} {
		rec := &writeRecorder{}
		w := &h2Writer{Conn: rec}
		w.rewrite(3, http2.ErrCodeRefusedStream)
		headers := 0
		w.watchHeaders(3, func(ok bool) {
			if ok {
				headers++
			}
		})
		for i := 0; i < len(raw); i += chunk {
			if _, err := w.Write(raw[i:min(i+chunk, len(raw))]); err != nil {
				t.Fatal(err)
			}
		}
		rd := http2.NewFramer(nil, bytes.NewReader(rec.buf.Bytes()))
		var codes []string
		for {
			f, err := rd.ReadFrame()
			if err != nil {
				break
			}
			if rst, ok := f.(*http2.RSTStreamFrame); ok {
				codes = append(codes, fmt.Sprintf("%d:%v", rst.StreamID, rst.ErrCode))
			}
		}
		if got := strings.Join(codes, " "); got != "3:REFUSED_STREAM 5:INTERNAL_ERROR" {
			t.Errorf("writes of %d bytes: resets %q, want stream 3 refused and 5 unchanged", chunk, got)
		}
		if headers != 1 {
			t.Errorf("writes of %d bytes: HEADERS of stream 3 reported %d times, want 1", chunk, headers)
		}
		if !bytes.Equal(raw[:len(raw)-26], rec.buf.Bytes()[:len(raw)-26]) || binary.BigEndian.Uint32(raw[len(raw)-4:]) != uint32(http2.ErrCodeInternal) {
			t.Errorf("writes of %d bytes: frames before the resets changed, or the caller's buffer was", chunk)
		}
	}
}

// TestWaits503: the replaysafe client waits for the prod model's 503
// (Retry-After: 1) only under a retry policy whose MaxRetryAfter, the
// policy's default (30 s) included, covers it; the peer never does.
func TestWaits503(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want bool
	}{
		{Config{}, false},
		{Config{Retry: 3}, true},
		{Config{Retry: 3, RetryAfterMax: RetryAfterAsked}, true},
		{Config{Retry: 3, RetryAfterMax: 100 * time.Millisecond}, false},
		{Config{RetryAfterMax: time.Minute}, false},
		{Config{Retry: 3, Peer: true}, false},
	} {
		if got := c.cfg.waits503(); got != c.want {
			t.Errorf("Retry %d, RetryAfterMax %v, Peer %v: waits503 %v, want %v", c.cfg.Retry, c.cfg.RetryAfterMax, c.cfg.Peer, got, c.want)
		}
	}
}
