package pool

import (
	"context"
	"errors"
	"fmt"
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

// displacedBy is the Redialing of a displaced request's resend that
// waits on the errors notAnswering names.
func displacedBy(notAnswering func(error) bool) Redialing {
	return Redialing{NotAnswering: notAnswering, Displaced: true}
}

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
				got[i], _, errs[i] = p.Acquire(ctx, r.key, mark, nil, nil, r.dial, displacedBy(isRefused))
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
				_, _, err := p.Acquire(ctx, r.key, 0, nil, nil, r.dial, displacedBy(isRefused))
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
				c, _, _ := p.Acquire(ctx, r.key, 0, nil, nil, r.dial, displacedBy(isRefused))
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
		if _, _, err := p.Acquire(context.Background(), r.key, 0, nil, nil, r.dial, Redialing{NotAnswering: isRefused}); !errors.Is(err, errRefused) {
			t.Errorf("original attempt: %v, want the refusal", err)
		}
		never := func(error) bool { return false }
		if _, _, err := p.Acquire(context.Background(), r.key, 0, nil, nil, r.dial, displacedBy(never)); !errors.Is(err, errRefused) {
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

// TestResendLostTeachesSpread: a connection that dies young (fewer
// exchanges completed than resends taken) with 8 resends on it makes a
// candidate; the third young death in a row on the route, each of a
// connection dialed after the last one died, confirms it, and a
// connection then takes at most 4 resends: a later resend skips a
// connection carrying 4, an original attempt does not. A connection lost
// with one resend teaches nothing, one that proved itself before it died
// clears a candidate, and connections that die together count once.
func TestResendLostTeachesSpread(t *testing.T) {
	p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
	key := Key{Addr: "a:1"}
	lone := &fakeMuxConn{state: MuxState{Key: key}}
	p.addWith(lone, p.Tick(), true)
	lone.Close(nil)
	p.ResendLost(lone, time.Now())
	if n := p.spreadLocked(key); n != 0 {
		t.Fatalf("a connection lost with one resend taught a spread of %d", n)
	}
	// dieYoung adds a connection that takes 8 resends and dies having
	// served served exchanges, and reports the loss.
	dieYoung := func(served int) {
		t.Helper()
		c := &fakeMuxConn{state: MuxState{Key: key}}
		p.addWith(c, p.Tick(), true)
		for range 7 {
			if got, _, _ := p.Take(key, 0, nil, true); got != c {
				t.Fatalf("took %p, want %p", got, c)
			}
		}
		c.state.served = served
		p.ResendLost(c, time.Now()) // still up: no loss
		c.Close(nil)
		p.ResendLost(c, time.Now())
		p.ResendLost(c, time.Now()) // its other resends: taught once
		p.mu.Lock()
		for range 8 {
			c.state.active--
		}
		p.mu.Unlock()
	}
	dieYoung(0)
	if n := p.spreadLocked(key); n != 0 {
		t.Fatalf("one young death taught a spread of %d", n)
	}
	dieYoung(8) // proved itself, then died: clears the candidate
	dieYoung(0)
	if n := p.spreadLocked(key); n != 0 {
		t.Fatalf("a young death after a proven one taught a spread of %d", n)
	}
	// Two connections dialed before the same event die together: they
	// count once.
	a := &fakeMuxConn{state: MuxState{Key: key}}
	p.addWith(a, p.Tick(), true)
	b := &fakeMuxConn{state: MuxState{Key: key}}
	p.addWith(b, p.Tick(), true)
	p.mu.Lock()
	a.state.resends, b.state.resends = 2, 2
	p.mu.Unlock()
	a.Close(nil)
	b.Close(nil)
	p.ResendLost(a, time.Now())
	p.ResendLost(b, time.Now())
	if n := p.spreadLocked(key); n != 0 {
		t.Fatalf("two young deaths in a row, the second two connections together, taught a spread of %d", n)
	}
	dieYoung(3)
	if n := p.spreadLocked(key); n != 4 {
		t.Fatalf("spread %d after three young deaths in a row, the last with 8 resends, want 4", n)
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

// TestRestartWindowHoldsNewAttempts: once a displaced request's redial
// found the route refusing (a restart), an original attempt that comes
// within RestartWindow waits for the route too instead of failing at
// once, sharing the spaced dials; both take the connection the route
// answers with. An original attempt after the window fails at once, as
// before any outage (choice 23). Fake time (testing/synctest).
func TestRestartWindowHoldsNewAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
		p.SetRedial(Redial{Base: 20 * time.Millisecond, Max: time.Second, Jitter: halfJitter})
		r := &refusingRoute{key: Key{Addr: "a:1"}, start: time.Now(), refusals: 3}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		displaced := make(chan *fakeMuxConn, 1)
		go func() {
			c, _, err := p.Acquire(ctx, r.key, p.Mark(), nil, nil, r.dial, displacedBy(isRefused))
			if err != nil {
				t.Errorf("displaced attempt: %v", err)
			}
			displaced <- c
		}()
		time.Sleep(5 * time.Millisecond) // its first dial was refused
		synctest.Wait()
		if n := len(r.dials()); n != 1 {
			t.Fatalf("%d dials before the original attempt, want 1", n)
		}
		c, _, err := p.Acquire(ctx, r.key, 0, nil, nil, r.dial, Redialing{NotAnswering: isRefused})
		if err != nil {
			t.Fatalf("original attempt during the restart: %v, want it to wait for the route", err)
		}
		if d := <-displaced; d != c {
			t.Errorf("displaced attempt took %p, the original %p: want the one connection", d, c)
		}
		if n := len(r.dials()); n != 4 {
			t.Errorf("%d dials, want 4 (3 refused, one at a time)", n)
		}
		if r.most != 1 {
			t.Errorf("%d dials at once, want 1", r.most)
		}

		// A route that stays down: an original attempt in the window
		// waits until the window has passed (and the next spaced dial
		// failed), then fails with the refusal; one after the window
		// fails at its first dial. A displaced one still waits.
		q := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
		down := &refusingRoute{key: Key{Addr: "b:1"}, start: time.Now(), refusals: 1 << 30}
		waitCtx, stop := context.WithTimeout(context.Background(), 2*RestartWindow)
		defer stop()
		gone := make(chan struct{})
		go func() {
			defer close(gone)
			q.Acquire(waitCtx, down.key, q.Mark(), nil, nil, down.dial, displacedBy(isRefused))
		}()
		time.Sleep(RestartWindow / 2)
		_, _, err = q.Acquire(context.Background(), down.key, 0, nil, nil, down.dial, Redialing{NotAnswering: isRefused})
		ended := time.Since(down.start)
		if !errors.Is(err, errRefused) {
			t.Errorf("original attempt in the window of a route that stays down: %v, want the refusal", err)
		}
		// The outage began with the first dial's refusal at 1 ms.
		if lo, hi := RestartWindow, RestartWindow+DefaultRedialMax+2*time.Millisecond; ended < lo || ended > hi {
			t.Errorf("original attempt in the window ended %v after the outage began, want within [%v, %v]", ended, lo, hi)
		}
		began := time.Now()
		_, _, err = q.Acquire(context.Background(), down.key, 0, nil, nil, down.dial, Redialing{NotAnswering: isRefused})
		if !errors.Is(err, errRefused) {
			t.Errorf("original attempt after the window: %v, want the refusal", err)
		}
		if took := time.Since(began); took != time.Millisecond {
			t.Errorf("original attempt after the window took %v, want one dial (1 ms)", took)
		}
		stop() // the displaced attempt's deadline
		<-gone
	})
}

// TestDialWaitingEachOwnConnection: HTTP/1.1's acquisition, where every
// attempt dials a connection of its own. 16 displaced requests' resends
// meet a restarting port: their first dials, made at once, are refused
// together and lengthen the spacing once; then one dials at a time,
// spaced, until the port answers, and the others dial their own
// connections as soon as it has. None fails. An original attempt before
// any outage fails at its refused dial; one in the restart window waits
// too. Fake time (testing/synctest).
func TestDialWaitingEachOwnConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewDown(Redial{Base: 20 * time.Millisecond, Max: time.Second, Jitter: halfJitter})
		const n = 16
		r := &refusingRoute{key: Key{Addr: "a:1"}, start: time.Now(), refusals: n + 4}
		if _, err := DialWaiting(context.Background(), d, r.key, Redialing{NotAnswering: isRefused}, r.dial); !errors.Is(err, errRefused) {
			t.Fatalf("original attempt before any outage: %v, want the refusal", err)
		}
		r.refusals++ // that dial was one of them
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, errs[i] = DialWaiting(ctx, d, r.key, displacedBy(isRefused), r.dial)
			})
		}
		time.Sleep(5 * time.Millisecond) // the first wave was refused
		synctest.Wait()
		var original error
		wg.Go(func() {
			_, original = DialWaiting(ctx, d, r.key, Redialing{NotAnswering: isRefused}, r.dial)
		})
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("displaced attempt %d: %v", i, err)
			}
		}
		if original != nil {
			t.Errorf("original attempt in the restart window: %v, want it to wait", original)
		}
		at := r.dials()
		// 1 refused before, 16 refused at once, 4 refused one at a time,
		// then 17 that succeed (16 displaced and the original).
		if want := 1 + n + 4 + n + 1; len(at) != want {
			t.Fatalf("%d dials, want %d: %v", len(at), want, at)
		}
		probes := at[1+n : 1+n+5] // the four refused alone and the one that answered
		// Spacing: 15 ms after the wave (it counted as one failure, not
		// 16), then 30, 60, 120 and 240 ms after each refused probe,
		// each counted from the failed dial's end (a dial takes 1 ms).
		want := []time.Duration{30, 60, 120, 240}
		for i := 1; i < len(probes); i++ {
			if gap := probes[i] - probes[i-1]; gap != time.Millisecond+want[i-1]*time.Millisecond {
				t.Errorf("probe %d came %v after the one before, want %v (dials at %v)", i, gap, time.Millisecond+want[i-1]*time.Millisecond, probes)
			}
		}
		if first := probes[0] - at[1]; first != time.Millisecond+15*time.Millisecond {
			t.Errorf("the first probe came %v after the wave, want 16ms", first)
		}
	})
}

// TestDownBounded: routes that each fail one dial, or lose one
// connection, more than maxDown of them, never make Down hold more than
// maxDown routes of either kind; a full Down forgets every route, waking
// their waiters (who then dial again), so a route failing now is always
// remembered.
func TestDownBounded(t *testing.T) {
	d := NewDown(Redial{})
	var firstUp <-chan struct{}
	for i := range 3 * maxDown {
		key := Key{Addr: fmt.Sprintf("r%d:1", i)}
		d.Failed(key, errRefused)
		_, up := d.Wait(key)
		if up == nil {
			t.Fatalf("route %d not remembered after its failed dial", i)
		}
		if i == 0 {
			firstUp = up
		}
		d.mu.Lock()
		n := len(d.routes)
		d.mu.Unlock()
		if n > maxDown {
			t.Fatalf("%d routes held, more than %d", n, maxDown)
		}
	}
	select {
	case <-firstUp:
	default:
		t.Error("the first route's waiters were never woken when Down forgot it")
	}
	for i := range 3 * maxDown {
		key := Key{Addr: fmt.Sprintf("l%d:1", i)}
		d.Lost(key)
		if !d.Restarting(key) {
			t.Fatalf("route %d not remembered after its loss", i)
		}
		d.mu.Lock()
		n := len(d.lost)
		d.mu.Unlock()
		if n > maxDown {
			t.Fatalf("%d lost routes held, more than %d", n, maxDown)
		}
	}
}

// TestLostConnectionMeansRestart: a route that lost a connection under
// a request (Down.Lost) and then refuses a dial is restarting, before
// any displaced request's redial was refused: an original attempt's
// refused dial waits for the route and takes the connection it answers
// with. Past RestartWindow after the loss, a refused dial is final
// again. Fake time (testing/synctest).
func TestLostConnectionMeansRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewDown(Redial{Base: 20 * time.Millisecond, Max: time.Second, Jitter: halfJitter})
		r := &refusingRoute{key: Key{Addr: "a:1"}, start: time.Now(), refusals: 2}
		w := Redialing{NotAnswering: isRefused}
		d.Lost(r.key)
		if !d.Restarting(r.key) {
			t.Fatal("a route that just lost a connection is not restarting")
		}
		if _, err := DialWaiting(context.Background(), d, r.key, w, r.dial); err != nil {
			t.Fatalf("original attempt after the loss: %v, want it to wait out the refusals", err)
		}
		if n := len(r.dials()); n != 3 {
			t.Errorf("%d dials, want 3 (2 refused)", n)
		}
		q := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
		m := &refusingRoute{key: Key{Addr: "b:1"}, start: time.Now(), refusals: 1}
		q.Lost(m.key)
		if _, _, err := q.Acquire(context.Background(), m.key, 0, nil, nil, m.dial, w); err != nil {
			t.Errorf("multiplexed original attempt after the loss: %v, want it to wait out the refusal", err)
		}

		late := &refusingRoute{key: Key{Addr: "c:1"}, start: time.Now(), refusals: 1 << 30}
		d.Lost(late.key)
		time.Sleep(RestartWindow)
		if d.Restarting(late.key) {
			t.Error("still restarting a whole RestartWindow after the loss")
		}
		if _, err := DialWaiting(context.Background(), d, late.key, w, late.dial); !errors.Is(err, errRefused) {
			t.Errorf("original attempt after the window: %v, want the refusal at once", err)
		}
		if n := len(late.dials()); n != 1 {
			t.Errorf("%d dials after the window, want 1", n)
		}
	})
}

// TestProvenConnectionTakesDisplaced: after one connection's death, a
// connection dialed before it takes the displaced requests' resends once
// it has read a frame since the death was seen (it proved itself alive),
// and not before; a mark that is not a failure's (Mark) proves nothing,
// and the dead connection itself never counts.
func TestProvenConnectionTakesDisplaced(t *testing.T) {
	p := NewMux[*fakeMuxConn](2, 0, NewLimit(0), nil)
	key := Key{Addr: "a:1"}
	other := &fakeMuxConn{state: MuxState{Key: key}}
	p.add(other, p.Tick())
	p.Done(other, true)
	dead := &fakeMuxConn{state: MuxState{Key: key}}
	p.add(dead, p.Tick())
	other.readAt = time.Now()
	time.Sleep(time.Millisecond) // the death is seen after other's last read
	mark := p.FailMark(dead)
	if got, _, _ := p.Take(key, mark, nil, true); got != nil {
		t.Fatalf("resend took %p, silent since the failure", got)
	}
	time.Sleep(time.Millisecond)
	other.readAt, dead.readAt = time.Now(), time.Now()
	p.Tick()
	if got, _, _ := p.Take(key, p.Mark(), nil, true); got != nil {
		t.Fatalf("resend after a mark that is no failure's took %p", got)
	}
	if got, _, _ := p.Take(key, mark, nil, true); got != other {
		t.Fatalf("resend took %p, want the connection that read since the failure %p", got, other)
	}
	if got, _, _ := p.Take(key, mark, nil, true); got != other {
		t.Fatalf("second resend took %p, want %p (the failed connection never counts)", got, other)
	}
}

// TestRejectionResendTakesAnotherConnection: after one connection's
// rejection of one request alone (RejectMark), the resend takes any
// other pooled connection, one dialed before the rejection included,
// and never the rejecting one, which stays pooled for original
// attempts; its later rejections share the mark. A connection that
// failed itself (FailMark) does not take the resend, nor does an older
// connection once eight later rejections pushed the mark out (it then
// reads as any other mark); a connection dialed after the rejection
// does.
func TestRejectionResendTakesAnotherConnection(t *testing.T) {
	key := Key{Addr: "a:1"}
	idle := func(p *Mux[*fakeMuxConn]) *fakeMuxConn {
		c := &fakeMuxConn{state: MuxState{Key: key}}
		p.add(c, p.Tick())
		p.Done(c, true)
		return c
	}
	take := func(p *Mux[*fakeMuxConn], after uint64) *fakeMuxConn {
		c, _, _ := p.Take(key, after, nil, after != 0)
		if c != nil {
			p.Done(c, true)
		}
		return c
	}

	p := NewMux[*fakeMuxConn](4, 0, NewLimit(0), nil)
	other, rejecter := idle(p), idle(p)
	mark := p.RejectMark(rejecter)
	if again := p.RejectMark(rejecter); again != mark {
		t.Fatalf("the rejecter's second rejection got mark %d, its first %d", again, mark)
	}
	if got := take(p, mark); got != other {
		t.Fatalf("resend took %p, want the other pooled connection %p", got, other)
	}
	p.Retire(other)
	if got := take(p, mark); got != nil {
		t.Fatalf("resend took %p, the rejecter, the only one pooled", got)
	}
	if got := take(p, 0); got != rejecter {
		t.Fatalf("an original attempt took %p, want the rejecter %p", got, rejecter)
	}

	p = NewMux[*fakeMuxConn](4, 0, NewLimit(0), nil)
	failed, rejecter := idle(p), idle(p)
	p.FailMark(failed)
	if got := take(p, p.RejectMark(rejecter)); got != nil {
		t.Fatalf("resend took %p, a connection that failed itself", got)
	}

	p = NewMux[*fakeMuxConn](4, 0, NewLimit(0), nil)
	_, rejecter = idle(p), idle(p)
	mark = p.RejectMark(rejecter)
	for range 8 {
		p.RejectMark(&fakeMuxConn{state: MuxState{Key: Key{Addr: "b:1"}}})
	}
	if got := take(p, mark); got != nil {
		t.Fatalf("resend took %p, older than a mark pushed out", got)
	}
	if late := idle(p); take(p, mark) != late {
		t.Fatalf("resend did not take %p, dialed after the rejection", late)
	}
}

// TestLearnedBudgetNeedsTwoConnections: one connection's GOAWAY after 3
// streams (when it had taken 5) bounds only the resends of the requests
// it displaced, at 3 a connection; an original attempt, or a resend after
// another failure, takes more. Every attempt of the same GOAWAY heard
// again from the first connection changes nothing; a second connection's
// GOAWAY after 3 streams bounds every attempt, and a third's after 2
// makes a new candidate instead.
func TestLearnedBudgetNeedsTwoConnections(t *testing.T) {
	p := NewMux[*fakeMuxConn](8, 0, NewLimit(0), nil)
	key := Key{Addr: "a:1"}
	// spent returns a connection that took n attempts.
	spent := func(n int) *fakeMuxConn {
		c := &fakeMuxConn{state: MuxState{Key: key}}
		p.add(c, p.Tick())
		for range n - 1 {
			if got, _, _ := p.Take(key, 0, nil, false); got != c {
				t.Fatalf("took %p, want %p", got, c)
			}
		}
		return c
	}
	// takes reports how many attempts a fresh connection takes from
	// after (0: originals), up to 8.
	takes := func(after uint64) int {
		t.Helper()
		c := &fakeMuxConn{state: MuxState{Key: key}}
		p.add(c, p.Tick())
		n := 1
		for n < 8 {
			got, _, _ := p.Take(key, after, nil, after != 0)
			if got != c {
				break
			}
			n++
		}
		c.Close(nil)
		return n
	}
	first := spent(5)
	now := time.Now()
	for range 3 { // each displaced stream reports the same GOAWAY
		p.Learn(first, 3, now)
	}
	first.Close(nil)
	mark := p.FailMark(first)
	if n := takes(mark); n != 3 {
		t.Fatalf("a fresh connection took %d of the displaced resends, want 3", n)
	}
	if n := takes(0); n != 8 {
		t.Fatalf("a fresh connection took %d original attempts after one GOAWAY, want all 8", n)
	}
	second := spent(6)
	p.Learn(second, 3, now)
	second.Close(nil)
	if n := takes(0); n != 3 {
		t.Fatalf("a fresh connection took %d original attempts after two GOAWAYs at 3, want 3", n)
	}
	third := spent(3)
	p.Learn(third, 2, now)
	third.Close(nil)
	if n := takes(0); n != 8 {
		t.Fatalf("a fresh connection took %d original attempts after a GOAWAY at another count, want all 8", n)
	}
}

// TestBurstCapLiftsOnceResendsThrough: the new connection a GOAWAY's
// burst lands on takes no original attempt beyond the GOAWAY's count
// while a resend it took is not yet on the wire (its stream ID could
// come after an original's, where the server's next GOAWAY would
// displace it again), nor before it completed as many exchanges as it
// took resends; once both hold it takes originals as any connection.
func TestBurstCapLiftsOnceResendsThrough(t *testing.T) {
	p := NewMux[*fakeMuxConn](8, 0, NewLimit(0), nil)
	key := Key{Addr: "a:1"}
	first := &fakeMuxConn{state: MuxState{Key: key}}
	p.add(first, p.Tick())
	for range 6 {
		p.Take(key, 0, nil, false)
	}
	p.Learn(first, 3, time.Now()) // 7 taken, 3 accepted: 4 displaced
	first.Close(nil)
	mark := p.FailMark(first)
	burst := &fakeMuxConn{state: MuxState{Key: key}}
	p.addFrom(burst, p.Tick(), true, mark)                       // resend r1
	if got, _, _ := p.Take(key, mark, nil, true); got != burst { // resend r2
		t.Fatalf("a resend of the burst took %p, want %p", got, burst)
	}
	if got, _, _ := p.Take(key, 0, nil, false); got != burst { // original o1, within the count
		t.Fatalf("an original within the GOAWAY's count took %p, want %p", got, burst)
	}
	if got, _, _ := p.Take(key, 0, nil, false); got != nil {
		t.Fatalf("an original beyond the count took %p with the burst's resends not through", got)
	}
	p.Sent(burst) // r1 written
	p.Done(burst, true)
	p.Done(burst, true) // o1 and r1 served: as many exchanges as resends
	if got, _, _ := p.Take(key, 0, nil, false); got != nil {
		t.Fatalf("an original beyond the count took %p while resend r2 was not written", got)
	}
	p.Sent(burst) // r2 written
	if got, _, _ := p.Take(key, 0, nil, false); got != burst {
		t.Fatalf("an original took %p once every resend was written and served as many, want %p", got, burst)
	}
}

// asyncConn is a fakeMuxConn whose socket closes after Close returns,
// as HTTP/2's graceful close does: Close hands the test its closed.
type asyncConn struct {
	fakeMuxConn
	done chan func()
}

func (c *asyncConn) Close(closed func()) {
	c.closed.Store(true)
	c.done <- closed
}

// TestLimitCountsSocketsUntilClosed: a connection whose close finishes
// after Close returns (HTTP/2's graceful close) keeps its room in
// MaxConnsPerHost until its socket is closed, so that the limit never
// lets a new dial open a socket beside it.
func TestLimitCountsSocketsUntilClosed(t *testing.T) {
	key := Key{Addr: "a:1"}
	limit := NewLimit(1)
	if !limit.TryOpen(key) {
		t.Fatal("no room in an empty limit")
	}
	p := NewMux[*asyncConn](2, 0, limit, nil)
	c := &asyncConn{fakeMuxConn: fakeMuxConn{state: MuxState{Key: key}}, done: make(chan func(), 1)}
	p.add(c, p.Tick())
	p.shut(c)
	done := <-c.done
	if limit.TryOpen(key) {
		t.Fatal("the limit gave the room back before the socket closed")
	}
	done()
	if !limit.TryOpen(key) {
		t.Fatal("the limit kept the room after the socket closed")
	}
}
