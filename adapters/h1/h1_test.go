package h1_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/spec"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a Clock the test advances by hand.
type fakeClock struct {
	mu     sync.Mutex
	now    fsm.Instant
	timers []*fakeTimer
}

type fakeTimer struct {
	at      fsm.Instant
	f       func()
	stopped bool
}

func (c *fakeClock) Now() fsm.Instant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// advance moves the clock and fires the timers that are due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for _, t := range c.timers {
		if !t.stopped && t.at <= c.now {
			t.stopped = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

func (c *fakeClock) armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}

func checkTrace(t *testing.T, r *h1.Recorder) {
	t.Helper()
	tr, err := spec.ParseTrace(strings.NewReader(r.Trace()))
	if err != nil {
		t.Fatalf("trace does not parse: %v\n%s", err, r.Trace())
	}
	if got := tr.Final(); got != r.Decision() {
		t.Errorf("trace replays to %v, recorder says %v\n%s", got, r.Decision(), r.Trace())
	}
}

func TestRecorderDeliverAndReuse(t *testing.T) {
	clk := &fakeClock{}
	r := h1.NewRecorder(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, clk, nil)
	r.Acquired(true)
	trace := r.ClientTrace()
	trace.WroteRequest(httptrace.WroteRequestInfo{}) // serialised, nothing on the wire yet
	if r.Facts()&fsm.FactWroteAll != 0 {
		t.Fatal("request-written before any byte reached the wire")
	}
	r.Wrote()
	r.Wrote()
	if r.Facts()&(fsm.FactWroteAny|fsm.FactWroteAll) != fsm.FactWroteAny|fsm.FactWroteAll {
		t.Fatalf("facts %v after the flush", r.Facts())
	}
	r.Read(5, nil)
	trace.GotFirstResponseByte() // the same byte again: not fed twice
	if d := r.FinalHeaders(); d.Action != fsm.ActionDeliver {
		t.Fatalf("FinalHeaders: %v", d)
	}
	if d := r.Complete(); d.Conn != fsm.ConnReuse {
		t.Fatalf("Complete: %v", d)
	}
	checkTrace(t, r)
	kinds := ""
	for _, e := range r.Events() {
		kinds += e.Kind.String() + " "
	}
	if want := "conn-acquired first-byte-written request-written first-response-byte final-headers response-complete "; kinds != want {
		t.Errorf("events %q, want %q", kinds, want)
	}
}

func TestRecorderInformationalThenClose(t *testing.T) {
	r := h1.NewRecorder(fsm.Request{Method: fsm.MethodPUT, Body: fsm.BodyBuffered}, fsm.Limits{}, &fakeClock{}, nil)
	r.Acquired(true)
	r.Wrote()
	r.Read(10, nil)
	if err := r.ClientTrace().Got1xxResponse(100, nil); err != nil {
		t.Fatal(err)
	}
	r.Read(0, io.EOF)
	d := r.Fail(fmt.Errorf("wrapped: %w", io.ErrUnexpectedEOF), context.Background(), nil)
	if d.Action != fsm.ActionFail || d.Rule != fsm.RuleResponseStarted {
		t.Fatalf("decision %v, want fail response-started", d)
	}
	checkTrace(t, r)
}

func TestRecorderFailFallbacks(t *testing.T) {
	untyped := errors.New("http: server closed idle connection")
	for _, tc := range []struct {
		name  string
		setup func(r *h1.Recorder)
		err   error
		ctx   func() context.Context
		local error
		want  fsm.Rule
	}{
		{name: "conn saw EOF", setup: func(r *h1.Recorder) { r.Wrote(); r.Read(0, io.EOF) }, err: untyped, want: fsm.RuleAmbiguousIdempotentResend},
		{name: "write failed, nothing written", setup: func(r *h1.Recorder) {
			r.WriteFailed(&net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)})
		}, err: untyped, want: fsm.RuleEvidenceNothingWritten},
		{name: "bytes then unknown error", setup: func(r *h1.Recorder) { r.Wrote(); r.Read(3, nil) }, err: untyped, want: fsm.RuleResponseStarted},
		{name: "unknown, no evidence", setup: func(r *h1.Recorder) { r.Wrote() }, err: untyped, want: fsm.RuleCanceled},
		{name: "body error", setup: func(r *h1.Recorder) { r.Wrote() }, err: io.ErrUnexpectedEOF, local: io.ErrUnexpectedEOF, want: fsm.RuleLocalFailure},
		{name: "caller canceled", setup: func(r *h1.Recorder) { r.Wrote() }, err: io.EOF, ctx: func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, want: fsm.RuleCanceled},
		{name: "caller deadline", setup: func(r *h1.Recorder) { r.Wrote() }, err: io.EOF, ctx: func() context.Context {
			ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
			cancel()
			return ctx
		}, want: fsm.RuleTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h1.NewRecorder(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, &fakeClock{}, nil)
			r.Acquired(true)
			tc.setup(r)
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			if d := r.Fail(tc.err, ctx, tc.local); d.Rule != tc.want {
				t.Errorf("decision %v, want %v", d, tc.want)
			}
			checkTrace(t, r)
		})
	}
}

func TestRecorderDeadline(t *testing.T) {
	clk := &fakeClock{}
	var fired []fsm.Phase
	r := h1.NewRecorder(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{Header: 100 * time.Millisecond}, clk, func(p fsm.Phase) { fired = append(fired, p) })
	r.Acquired(true)
	r.Wrote()
	r.ClientTrace().WroteRequest(httptrace.WroteRequestInfo{})
	if clk.armed() != 1 {
		t.Fatalf("%d timers armed, want 1", clk.armed())
	}
	clk.advance(99 * time.Millisecond)
	if len(fired) != 0 || r.Decision().Action.Final() {
		t.Fatalf("fired early: %v %v", fired, r.Decision())
	}
	clk.advance(time.Millisecond)
	if len(fired) != 1 || fired[0] != fsm.PhaseHeader {
		t.Fatalf("fired %v, want [header]", fired)
	}
	if d := r.Decision(); d.Rule != fsm.RuleTimeout {
		t.Fatalf("decision %v", d)
	}
	// The stack's error that follows the abort changes nothing.
	if d := r.Fail(context.Canceled, context.Background(), nil); d.Rule != fsm.RuleTimeout {
		t.Fatalf("decision after the abort %v", d)
	}
	checkTrace(t, r)
	r.Stop()
	if clk.armed() != 0 {
		t.Errorf("%d timers armed after Stop", clk.armed())
	}
}

func TestRecorderDeadlineDisarmedByProgress(t *testing.T) {
	clk := &fakeClock{}
	r := h1.NewRecorder(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{Acquire: time.Second, Header: time.Second}, clk, func(fsm.Phase) { t.Error("deadline fired") })
	r.Acquired(false) // leaves the acquire phase: its timer goes
	if clk.armed() != 0 {
		t.Fatalf("%d timers armed in the write phase without a write limit", clk.armed())
	}
	r.Wrote()
	r.ClientTrace().WroteRequest(httptrace.WroteRequestInfo{})
	r.Read(1, nil)
	r.FinalHeaders()
	clk.advance(2 * time.Second)
	if d := r.Decision(); d.Action != fsm.ActionDeliver {
		t.Errorf("decision %v", d)
	}
}

func TestRecorderBodyRead(t *testing.T) {
	r := h1.NewRecorder(fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyOneShotUntouched}, fsm.Limits{}, &fakeClock{}, nil)
	r.Acquired(true)
	r.BodyRead()
	r.BodyRead()
	d := r.Fail(&net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, context.Background(), nil)
	if d.Rule != fsm.RuleEvidenceBodyConsumed {
		t.Errorf("decision %v, want evidence-body-consumed", d)
	}
	checkTrace(t, r)
}

func TestRecorderAcquireFailed(t *testing.T) {
	r := h1.NewRecorder(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, &fakeClock{}, nil)
	if d := r.AcquireFailed(context.Background()); d.Rule != fsm.RuleAcquireFailed {
		t.Errorf("decision %v", d)
	}
	checkTrace(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r = h1.NewRecorder(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, &fakeClock{}, nil)
	if d := r.AcquireFailed(ctx); d.Rule != fsm.RuleCanceled {
		t.Errorf("decision %v", d)
	}
}

func TestRecorderReadBeforeAcquired(t *testing.T) {
	r := h1.NewRecorder(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, &fakeClock{}, nil)
	r.Read(1, nil) // attached, not yet acquired: fed right after
	r.Acquired(true)
	if r.Facts()&fsm.FactResponseByte == 0 {
		t.Fatalf("facts %v: the early byte was lost", r.Facts())
	}
	if d := r.Fail(io.EOF, context.Background(), nil); d.Rule != fsm.RuleResponseStarted {
		t.Errorf("decision %v, want response-started", d)
	}
	checkTrace(t, r)
}

// sink records what a Conn reports.
type sink struct {
	mu            sync.Mutex
	wrote, reads  int
	readErr, werr error
}

func (s *sink) Wrote()                { s.mu.Lock(); s.wrote++; s.mu.Unlock() }
func (s *sink) WriteFailed(err error) { s.mu.Lock(); s.werr = err; s.mu.Unlock() }
func (s *sink) Read(n int, err error) {
	s.mu.Lock()
	s.reads += n
	if err != nil {
		s.readErr = err
	}
	s.mu.Unlock()
}

func TestConnReportsAndStale(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := h1.NewConn(a, nil)
	s := &sink{}
	if err := c.Attach(s); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 3)
		io.ReadFull(b, buf)
		b.Write([]byte("resp"))
	}()
	if _, err := c.Write([]byte("req")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if s.wrote != 1 || s.reads != 4 {
		t.Errorf("sink saw %d writes, %d bytes read", s.wrote, s.reads)
	}
	c.Detach()
	done := make(chan error, 1)
	go func() { _, err := c.Read(buf); done <- err }() // net/http's idle read
	b.Close()
	if err := <-done; err == nil {
		t.Fatal("read on a closed pipe succeeded")
	}
	if !c.Stale() {
		t.Fatal("not stale after the peer closed it while idle")
	}
	if err := c.Attach(s); !errors.Is(err, h1.ErrStale) {
		t.Errorf("Attach on a stale conn: %v, want ErrStale", err)
	}
	c.Close()
}

func TestConnWireCounter(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	w := h1.NewWireCounter(a)
	go io.Copy(io.Discard, b)
	if n, err := w.Write([]byte("hello")); n != 5 || err != nil || w.Written() != 5 {
		t.Errorf("Write: %d %v, counted %d", n, err, w.Written())
	}
	a.Close()
}
