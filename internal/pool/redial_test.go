package pool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var errRefused = errors.New("connection refused")

// refusingRoute is a dialer for one route whose port refuses until up
// is set: it records when each dial ran and how many ran at once.
type refusingRoute struct {
	key      Key
	start    time.Time
	refusals int // dials refused before the port answers

	mu      sync.Mutex
	at      []time.Duration // when each dial started, from start
	running int
	most    int
}

func (r *refusingRoute) dial() (*fakeMuxConn, error) {
	r.mu.Lock()
	r.at = append(r.at, time.Since(r.start))
	n := len(r.at)
	r.running++
	r.most = max(r.most, r.running)
	r.mu.Unlock()
	time.Sleep(time.Millisecond) // a dial takes a while: the others must wait, not dial
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
	if n <= r.refusals {
		return nil, errRefused
	}
	return &fakeMuxConn{state: MuxState{Key: r.key}}, nil
}

func (r *refusingRoute) dials() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.at...)
}

func isRefused(err error) bool { return errors.Is(err, errRefused) }

// halfJitter draws the middle of the range: a delay of d/2 + d/4.
func halfJitter(d time.Duration) time.Duration { return d / 2 }

// TestRedialSharedAndSpaced: 64 requests displaced by one connection's
// death want a new connection while the route's port refuses its first
// three dials. They share one dial at a time, spaced by the jittered
// backoff (base 20 ms: waits of 15, 30 and 60 ms with the middle of each
// range drawn), none fails, and all 64 share the connection the fourth
// dial makes. Fake time (testing/synctest).
func TestRedialSharedAndSpaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
		p.SetRedial(Redial{Base: 20 * time.Millisecond, Max: time.Second, Jitter: halfJitter})
		r := &refusingRoute{key: Key{Addr: "a:1"}, start: time.Now(), refusals: 3}
		mark := p.Mark()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const n = 64
		got := make([]*fakeMuxConn, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				got[i], _, errs[i] = p.Acquire(ctx, r.key, mark, nil, nil, r.dial, isRefused)
			})
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil || got[i] == nil || got[i] != got[0] {
				t.Fatalf("attempt %d: %v, %p (first got %p)", i, errs[i], got[i], got[0])
			}
		}
		// Dial k starts after dial k-1 (1 ms) and its spacing.
		want := []time.Duration{0, 16 * time.Millisecond, 47 * time.Millisecond, 108 * time.Millisecond}
		at := r.dials()
		if len(at) != len(want) {
			t.Fatalf("dials at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Errorf("dial %d at %v, want %v (all: %v)", i, at[i], want[i], at)
			}
		}
		if r.most != 1 {
			t.Errorf("%d dials at once, want 1", r.most)
		}
	})
}

// TestRedialEndsAtDeadline: a route that never answers keeps its
// displaced requests waiting until their acquisition deadline, with
// dials spaced up to the backoff's maximum (about one a second), and
// none after the deadline; each, whether it dialed or not, ends with a
// DownError naming the last refusal. Fake time (testing/synctest).
func TestRedialEndsAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
		p.SetRedial(Redial{Base: 25 * time.Millisecond, Max: time.Second, Jitter: halfJitter})
		r := &refusingRoute{key: Key{Addr: "a:1"}, start: time.Now(), refusals: 1 << 30}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range 16 {
			wg.Go(func() {
				_, _, err := p.Acquire(ctx, r.key, 0, nil, nil, r.dial, isRefused)
				var down *DownError
				if errors.Is(err, context.DeadlineExceeded) && errors.As(err, &down) && errors.Is(err, errRefused) {
					failed.Add(1)
				}
			})
		}
		wg.Wait()
		if failed.Load() != 16 {
			t.Errorf("%d of 16 ended at the deadline with the route's last refusal", failed.Load())
		}
		// 25, 50, ... 800 ms waits (¾ of each), then ¾ s: about 15 in 10 s.
		if n := len(r.dials()); n < 10 || n > 20 {
			t.Errorf("%d dials in 10 s: %v", n, r.dials())
		}
		time.Sleep(5 * time.Second)
		if n := len(r.dials()); n > 20 {
			t.Errorf("dials went on after the deadline: %d", n)
		}
	})
}

// TestRedialWokenByNewConn: displaced requests waiting out a refusing
// route take a connection another attempt added at once, without
// waiting for their next dial. Fake time (testing/synctest).
func TestRedialWokenByNewConn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
		p.SetRedial(Redial{Base: time.Second, Max: time.Second, Jitter: halfJitter})
		r := &refusingRoute{key: Key{Addr: "a:1"}, start: time.Now(), refusals: 1}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got := make(chan *fakeMuxConn, 2)
		for range 2 {
			go func() {
				c, _, _ := p.Acquire(ctx, r.key, 0, nil, nil, r.dial, isRefused)
				got <- c
			}()
		}
		time.Sleep(10 * time.Millisecond) // the dial failed; the next waits 750 ms
		synctest.Wait()
		other := &fakeMuxConn{state: MuxState{Key: r.key}}
		p.add(other, p.Tick()) // an original attempt's dial
		start := time.Now()
		for range 2 {
			if c := <-got; c != other {
				t.Fatalf("took %p, want the added connection %p", c, other)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("woken after %v, want at once", d)
		}
		if n := len(r.dials()); n != 1 {
			t.Errorf("%d dials, want 1", n)
		}
	})
}

// TestDialFailureFinalWithoutRedial: an attempt that is not a displaced
// request's resend (redial nil), or whose dial failed in a way that is no
// refusal, fails at once with the dial's error (RS04).
func TestDialFailureFinalWithoutRedial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
		r := &refusingRoute{key: Key{Addr: "a:1"}, start: time.Now(), refusals: 1 << 30}
		if _, _, err := p.Acquire(context.Background(), r.key, 0, nil, nil, r.dial, nil); !errors.Is(err, errRefused) {
			t.Errorf("original attempt: %v, want the refusal", err)
		}
		never := func(error) bool { return false }
		if _, _, err := p.Acquire(context.Background(), r.key, 0, nil, nil, r.dial, never); !errors.Is(err, errRefused) {
			t.Errorf("displaced attempt, final error: %v, want it", err)
		}
		if n := len(r.dials()); n != 2 {
			t.Errorf("%d dials, want 2", n)
		}
	})
}

// TestResendSkipsConnDialedBeforeFailure: a connection whose dial
// started before a failure was seen joins the pool after it, but a
// resend after that failure does not take it (it may have reached the
// same dying server); one whose dial started after the failure is taken.
func TestResendSkipsConnDialedBeforeFailure(t *testing.T) {
	p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
	key := Key{Addr: "a:1"}
	early := &fakeMuxConn{state: MuxState{Key: key}}
	tick := p.Tick() // its dial starts
	mark := p.Mark() // a connection fails under a request
	p.add(early, tick)
	p.Done(early, true)
	if got, _, _ := p.Take(key, mark, nil, false); got != nil {
		t.Fatalf("resend took %p, dialed before its failure", got)
	}
	if got, _, _ := p.Take(key, 0, nil, false); got != early {
		t.Fatalf("original attempt took %p, want %p", got, early)
	}
	late := &fakeMuxConn{state: MuxState{Key: key}}
	p.add(late, p.Tick())
	if got, _, _ := p.Take(key, mark, nil, false); got != late {
		t.Fatalf("resend took %p, want the connection dialed after its failure %p", got, late)
	}
}

// TestFailMarkSharedByDisplaced: the requests one connection's death
// displaced get the same mark, however late each saw the death, so the
// redial the first of them started serves the later ones too.
func TestFailMarkSharedByDisplaced(t *testing.T) {
	p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
	key := Key{Addr: "a:1"}
	dead := &fakeMuxConn{state: MuxState{Key: key}}
	p.add(dead, p.Tick())
	first := p.FailMark(dead)
	tick := p.Tick() // the first displaced request's redial starts
	if late := p.FailMark(dead); late != first {
		t.Fatalf("a later request displaced by the same death got mark %d, the first %d", late, first)
	}
	redial := &fakeMuxConn{state: MuxState{Key: key}}
	p.add(redial, tick)
	if got, _, _ := p.Take(key, first, nil, false); got != redial {
		t.Fatalf("late displaced request took %p, want the shared redial %p", got, redial)
	}
}

// TestResendLostTeachesSpread: a connection that dies with 8 resends on
// it teaches its route to give a connection at most 4 resends; a later
// resend then skips a connection carrying 4, an original attempt does
// not, and a connection lost with one resend teaches nothing.
func TestResendLostTeachesSpread(t *testing.T) {
	p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
	key := Key{Addr: "a:1"}
	lone := &fakeMuxConn{state: MuxState{Key: key}}
	p.addWith(lone, p.Tick(), true)
	lone.Close()
	p.ResendLost(lone, time.Now())
	if n := p.spreadLocked(key); n != 0 {
		t.Fatalf("a connection lost with one resend taught a spread of %d", n)
	}
	dead := &fakeMuxConn{state: MuxState{Key: key}}
	p.addWith(dead, p.Tick(), true)
	for range 7 {
		if got, _, _ := p.Take(key, 0, nil, true); got != dead {
			t.Fatalf("took %p, want %p", got, dead)
		}
	}
	p.ResendLost(dead, time.Now()) // still up: no loss
	dead.Close()
	p.ResendLost(dead, time.Now())
	p.ResendLost(dead, time.Now()) // its other resends: taught once
	if n := p.spreadLocked(key); n != 4 {
		t.Fatalf("spread %d after losing 8 resends, want 4", n)
	}
	busy := &fakeMuxConn{state: MuxState{Key: key}}
	p.addWith(busy, p.Tick(), true)
	for range 3 {
		p.Take(key, 0, nil, true)
	}
	if got, _, _ := p.Take(key, 0, nil, true); got != nil {
		t.Fatalf("a fifth resend took %p", got)
	}
	if got, _, _ := p.Take(key, 0, nil, false); got != busy {
		t.Fatalf("an original attempt took %p, want %p", got, busy)
	}
}
