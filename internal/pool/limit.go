package pool

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Limit counts the connections of each route, open or being dialed,
// against the Transport's MaxConnsPerHost, and wakes the attempts waiting for
// room: a connection closed, a stream ended, an idle connection came
// back. A route's entry exists only while it has connections or
// waiters, so the maps are bounded by the routes in use. Without a
// limit nothing is counted and nobody waits: nothing would read the
// counts.
type Limit struct {
	max int // <= 0: no limit

	mu      sync.Mutex
	open    map[Key]int
	changed map[Key]chan struct{} // closed at the next change of the key
	// waiting counts changed's entries, so that notify, called on every
	// return to a pool, takes no lock when nobody waits. A waiter that
	// registers just after such a notify misses it as it would miss one
	// that took the lock first, and looks again after limitPoll.
	waiting atomic.Int64
}

func NewLimit(max int) *Limit {
	return &Limit{max: max, open: map[Key]int{}, changed: map[Key]chan struct{}{}}
}

// TryOpen takes room for one new connection to key, or reports that the
// route is at its limit.
func (l *Limit) TryOpen(key Key) bool {
	if l.max <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= l.max {
		return false
	}
	l.open[key]++
	return true
}

// Closed gives back the room of one connection to key (closed, or its
// dial failed) and wakes the waiters.
func (l *Limit) Closed(key Key) {
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	if n := l.open[key] - 1; n > 0 {
		l.open[key] = n
	} else {
		delete(l.open, key)
	}
	l.wakeLocked(key)
	l.mu.Unlock()
}

// Notify wakes the attempts waiting on key: room on a connection may
// have freed.
func (l *Limit) Notify(key Key) {
	if l.waiting.Load() == 0 {
		return
	}
	l.mu.Lock()
	l.wakeLocked(key)
	l.mu.Unlock()
}

func (l *Limit) wakeLocked(key Key) {
	if ch, ok := l.changed[key]; ok {
		close(ch)
		delete(l.changed, key)
		l.waiting.Add(-1)
	}
}

// limitPoll bounds how long a waiting attempt sleeps without news: a
// pooled connection the peer closed frees its room only when an attempt
// looks at it, which the waiter then does itself.
const limitPoll = 50 * time.Millisecond

// Wait blocks until something changed for key, limitPoll passed, or ctx
// ended (its cause is returned).
func (l *Limit) Wait(ctx context.Context, key Key) error {
	l.mu.Lock()
	ch, ok := l.changed[key]
	if !ok {
		ch = make(chan struct{})
		l.changed[key] = ch
		l.waiting.Add(1)
	}
	l.mu.Unlock()
	t := time.NewTimer(limitPoll)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
