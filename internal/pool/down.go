package pool

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Down remembers the routes whose dials found them not answering (a
// server restarting refuses its port): how long until the next dial,
// the last dial's error, and who is dialing. Mux uses one for the
// attempts that wait for a multiplexed route; the HTTP/1.1 acquisition,
// where every attempt dials its own connection, uses one through
// DialWaiting. It holds at most maxDown routes.
type Down struct {
	redial Redial

	mu     sync.Mutex
	routes map[Key]*routeDown
	// lost holds, per route, when a connection last died under a
	// request (Lost): a refused dial within RestartWindow of it is a
	// restart in progress. At most maxDown routes.
	lost map[Key]time.Time
}

// routeDown is a route whose last dial failed as not answering.
type routeDown struct {
	since    time.Time     // when its first failed dial of this outage ended
	failures int           // dials failed in a row
	err      error         // the last one's error
	next     time.Time     // no dial for the route before this
	up       chan struct{} // closed when a connection for the route is made
	probing  chan struct{} // non-nil while one attempt dials it (Probe); closed when that dial ends
}

// Redial spaces the dials of a route that does not answer, for the
// requests waiting for it to come back: after the n-th failed dial in a
// row the next waits a delay drawn in [d/2, d), where d is Base·2ⁿ⁻¹ up
// to Max. The first dial after a connection's death is not delayed (a
// resend runs at once, DESIGN.md); only a dial after a failed one is.
type Redial struct {
	Base, Max time.Duration
	// Jitter returns a duration drawn uniformly in [0, d); nil means
	// math/rand/v2 (tests set it).
	Jitter func(d time.Duration) time.Duration
}

// Default spacing of a down route's dials: a port that refuses for
// 100 ms (a server restarting) costs about three refused dials; one that
// stays down costs about one a second, until the waiting requests'
// acquisition deadline.
const (
	DefaultRedialBase = 25 * time.Millisecond
	DefaultRedialMax  = time.Second
)

// RestartWindow is how long after a route was first seen down (a
// redial found the port refusing) or lost a connection under a request
// a new request's refused dial also waits for the route instead of
// failing at once: a restart in progress, which a request arriving a
// moment later would otherwise fail on (spec/choices.md, choice 23).
// Past it, the route is taken to be gone and a new request's failed dial
// is final again, so a server that never comes back costs a new request
// no more than the window and one spacing.
const RestartWindow = 5 * time.Second

// maxDown bounds the routes remembered as down.
const maxDown = 1024

// NewDown returns a Down with spacing r.
func NewDown(r Redial) *Down {
	return &Down{redial: r, routes: map[Key]*routeDown{}, lost: map[Key]time.Time{}}
}

// Lost records that a connection for key died under a request (closed
// or reset by the peer or the network): if the route's next dials are
// refused within RestartWindow, it is restarting.
func (d *Down) Lost(key Key) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.lost[key]; !ok && len(d.lost) >= maxDown {
		clear(d.lost) // forgetting only makes a later refusal final, as without the record
	}
	d.lost[key] = time.Now()
}

// delay returns the wait before the dial that follows failures failed
// dials in a row.
func (r Redial) delay(failures int) time.Duration {
	base, most := r.Base, r.Max
	if base <= 0 {
		base = DefaultRedialBase
	}
	if most < base {
		most = max(DefaultRedialMax, base)
	}
	d := base
	for i := 1; i < failures && d < most; i++ {
		d *= 2
	}
	d = min(d, most)
	jitter := r.Jitter
	if jitter == nil {
		jitter = func(d time.Duration) time.Duration { return rand.N(d) }
	}
	half := d / 2
	if half <= 0 {
		return d
	}
	return d - half + jitter(half)
}

func (r Redial) max() time.Duration {
	if r.Max > 0 {
		return r.Max
	}
	return DefaultRedialMax
}

// Failed records that a dial for key failed with err as not answering:
// the route is down, and its next dial waits for the spacing.
func (d *Down) Failed(key Key, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	r, ok := d.routes[key]
	if !ok {
		if len(d.routes) >= maxDown {
			for k := range d.routes {
				d.upLocked(k)
			}
		}
		r = &routeDown{up: make(chan struct{}), since: now}
		d.routes[key] = r
	}
	if !r.next.IsZero() && now.Sub(r.next) > d.redial.max() {
		r.failures = 0 // an old outage: start the spacing again
		r.since = now
	}
	r.err = err
	if now.Before(r.next) {
		// Another dial's failure set the spacing that is still running:
		// dials that ran at once (HTTP/1.1 attempts before the route was
		// known to be down) fail together and lengthen it once.
		return
	}
	r.failures++
	r.next = now.Add(d.redial.delay(r.failures))
}

// Wait returns, for a route that is down, how long to wait before its
// next dial and a channel closed when a connection for it is made; 0
// when it may be dialed now.
func (d *Down) Wait(key Key) (time.Duration, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.routes[key]
	if !ok {
		return 0, nil
	}
	return time.Until(r.next), r.up
}

// Err returns the error of the last failed dial of a route that is
// down, or nil.
func (d *Down) Err(key Key) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.routes[key]; ok {
		return r.err
	}
	return nil
}

// IsDown reports whether key is down.
func (d *Down) IsDown(key Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.routes[key]
	return ok
}

// Restarting reports whether key went down, or lost a connection under
// a request, less than RestartWindow ago: a new request's refused dial
// then waits for the route too.
func (d *Down) Restarting(key Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.routes[key]; ok && time.Since(r.since) < RestartWindow {
		return true
	}
	at, ok := d.lost[key]
	return ok && time.Since(at) < RestartWindow
}

// Up forgets that key is down, waking the attempts waiting for it.
func (d *Down) Up(key Key) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.upLocked(key)
}

func (d *Down) upLocked(key Key) {
	if r, ok := d.routes[key]; ok {
		close(r.up)
		delete(d.routes, key)
	}
}

// Probe is the turn of an attempt that wants to dial key, for a route
// where every attempt dials its own connection (HTTP/1.1): while the
// route is down only one dials at a time. It returns done, to call once
// the dial ended (after Failed or Up), when the caller may dial now; or
// a channel to wait on (the spacing's end, the route coming up, or the
// dialing attempt's end), after which the caller asks again.
func (d *Down) Probe(key Key) (done func(), wait <-chan struct{}, after time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.routes[key]
	if !ok {
		return func() {}, nil, 0
	}
	if r.probing != nil {
		return nil, r.probing, 0
	}
	if w := time.Until(r.next); w > 0 {
		return nil, r.up, w
	}
	ch := make(chan struct{})
	r.probing = ch
	return func() {
		d.mu.Lock()
		if r.probing == ch {
			r.probing = nil
		}
		d.mu.Unlock()
		close(ch)
	}, nil, 0
}

// DialWaiting runs dial for key as w says, for a route whose every
// attempt dials its own connection (HTTP/1.1). An attempt that does not
// wait (neither a displaced request's resend nor, within RestartWindow,
// any attempt of a route that is down) dials once and its error is
// final. One that waits treats a dial that found the route not
// answering as no attempt: it marks the route down and dials again after
// the route's spacing, one attempt dialing at a time while the route is
// down, until a dial succeeds, fails otherwise, or ctx ends (a
// *DownError naming the last refusal).
func DialWaiting[C any](ctx context.Context, d *Down, key Key, w Redialing, dial func() (C, error)) (C, error) {
	var zero C
	for {
		if w.NotAnswering == nil || !w.Displaced && !d.Restarting(key) {
			return dial()
		}
		done, wait, after := d.Probe(key)
		if done == nil {
			if err := waitTurn(ctx, after, wait); err != nil {
				if last := d.Err(key); last != nil {
					return zero, &DownError{Cause: err, LastDial: last}
				}
				return zero, err
			}
			continue
		}
		c, err := dial()
		switch {
		case err == nil:
			d.Up(key)
		case ctx.Err() == nil && w.NotAnswering(err):
			d.Failed(key, err)
			done()
			continue
		}
		done()
		return c, err
	}
}

// waitTurn waits for ch, for d when it is positive, or for ctx's end
// (its cause).
func waitTurn(ctx context.Context, d time.Duration, ch <-chan struct{}) error {
	var tm <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tm = t.C
	}
	select {
	case <-tm:
		return nil
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
