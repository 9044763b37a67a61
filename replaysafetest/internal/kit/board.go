package kit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrClosed is what Board.Wait returns once the server has finished
// closing with the awaited condition still false; each server wraps it
// in its own ErrClosed.
var ErrClosed = errors.New("server closed")

// Board is the change notification every scripted server keeps beside
// its records: its goroutines change the records under a mutex the
// server owns and call Notify (or Update); Wait blocks until a condition
// over the records holds. The zero Board is not usable: call Init.
type Board struct {
	mu       *sync.Mutex
	changed  chan struct{} // closed and replaced on every change
	finished bool          // the server has finished closing
}

// Init makes b ready; mu is the mutex that guards the server's records.
func (b *Board) Init(mu *sync.Mutex) {
	b.mu = mu
	b.changed = make(chan struct{})
}

// NotifyLocked wakes every waiter; the caller holds the mutex.
func (b *Board) NotifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Update runs f with the mutex held and wakes the waiters.
func (b *Board) Update(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
	b.NotifyLocked()
}

// Finish records that the server has finished closing and wakes the
// waiters: from then on a Wait whose condition is false returns at once.
func (b *Board) Finish() { b.Update(func() { b.finished = true }) }

// Wait blocks until cond holds, the context ends, or the server has
// finished closing with cond still false (ErrClosed). A context without
// a deadline is bounded by timeout. With locked, cond runs with the
// mutex held; otherwise without it (it may then call the server's
// methods). name prefixes the context's error.
func (b *Board) Wait(ctx context.Context, timeout time.Duration, name string, locked bool, cond func() bool) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	for { // each pass waits for a change or the end of ctx
		b.mu.Lock()
		ch, finished := b.changed, b.finished
		ok := locked && cond()
		b.mu.Unlock()
		if !locked {
			ok = cond()
		}
		switch {
		case ok:
			return nil
		case finished:
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s: wait: %w", name, ctx.Err())
		}
	}
}

// Snapshot returns clones of the records recs returns (called with mu
// held) for which keep (nil: every record) holds, in order.
func Snapshot[R any](mu *sync.Mutex, recs func() []*R, keep func(*R) bool, clone func(*R) R) []R {
	mu.Lock()
	defer mu.Unlock()
	out := []R{}
	for _, r := range recs() {
		if keep == nil || keep(r) {
			out = append(out, clone(r))
		}
	}
	return out
}

// Locked returns f's result, computed with mu held.
func Locked[T any](mu *sync.Mutex, f func() T) T {
	mu.Lock()
	defer mu.Unlock()
	return f()
}
