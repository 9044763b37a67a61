package kit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Core is the record keeping and the life cycle the scripted HTTP/2 and
// HTTP/3 servers share: the streams (R) and connections (C) recorded,
// in arrival order, the waiters on them, the lifetime timer and one
// Close. Reqs and Conns are guarded by Mu; every change to them goes
// through Update (or NotifyLocked) so that the waiters see it.
type Core[R, C any] struct {
	// Mu guards Reqs, Conns and the servers' own records.
	Mu sync.Mutex
	// Reqs is every stream recorded.
	Reqs []*R
	// Conns is every connection accepted.
	Conns []*C
	// WG counts the server's goroutines: Close waits for them.
	WG sync.WaitGroup

	spec      CoreSpec[R, C]
	board     Board       // wakes the waiters on every change of the records
	life      *time.Timer // closes the server after its lifetime
	closing   bool        // Close has started: accept no more connections
	closeOnce sync.Once
}

// CoreSpec is what a Core needs to know of its server.
type CoreSpec[R, C any] struct {
	// Name prefixes log lines and wait errors: "h2server".
	Name string
	// WaitTimeout bounds a Wait whose context has no deadline.
	WaitTimeout time.Duration
	// Logf, if set, receives the log lines.
	Logf func(format string, args ...any)
	// ErrClosed is the server's own error for a Wait that cannot succeed
	// any more.
	ErrClosed error
	// Clone copies a stream record for a caller.
	Clone func(*R) R
	// ConnOf is a stream's connection index, Done whether the server will
	// record nothing more for it.
	ConnOf func(*R) int
	Done   func(*R) bool
	// Closed reports whether a connection is over.
	Closed func(*C) bool
}

// Init readies c for a server described by spec.
func (c *Core[R, C]) Init(spec CoreSpec[R, C]) {
	c.spec = spec
	c.board.Init(&c.Mu)
}

// Logf logs a line through the server's Config.Logf, if any.
func (c *Core[R, C]) Logf(format string, args ...any) {
	if c.spec.Logf != nil {
		c.spec.Logf(c.spec.Name+": "+format, args...)
	}
}

// Update runs f with Mu held and wakes the waiters.
func (c *Core[R, C]) Update(f func()) { c.board.Update(f) }

// CloseAfter makes the server close itself (with closeFn) after d.
func (c *Core[R, C]) CloseAfter(d time.Duration, closeFn func() error) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	c.life = time.AfterFunc(d, func() {
		c.Logf("lifetime %v over: closing", d)
		closeFn()
	})
}

// NotifyLocked wakes the waiters after a change made with Mu held.
func (c *Core[R, C]) NotifyLocked() { c.board.NotifyLocked() }

// Go runs f on a goroutine of the server's (counted in WG).
func (c *Core[R, C]) Go(f func()) {
	c.WG.Add(1)
	go func() {
		defer c.WG.Done()
		f()
	}()
}

// Admit records an accepted connection unless Close has started: with
// Mu held, newConn makes its record from its index and returns the
// goroutine that serves it, which Admit starts (counted in WG). It
// reports whether the connection was admitted.
func (c *Core[R, C]) Admit(newConn func(idx int) (*C, func())) bool {
	c.Mu.Lock()
	if c.closing {
		c.Mu.Unlock()
		return false
	}
	rec, serve := newConn(len(c.Conns))
	c.Conns = append(c.Conns, rec)
	c.WG.Add(1)
	c.board.NotifyLocked()
	c.Mu.Unlock()
	go serve()
	return true
}

// Close runs once, whoever calls it: it stops the lifetime timer and
// admits no more connections; runs stop with Mu held, then what stop
// returns without it (close the listener and the live connections);
// waits for the server's goroutines; runs release (nil: nothing); and
// wakes every waiter for good. Every call returns after the first has
// finished.
func (c *Core[R, C]) Close(stop func() func(), release func()) {
	c.closeOnce.Do(func() {
		c.Mu.Lock()
		if c.life != nil {
			c.life.Stop()
		}
		c.closing = true
		halt := stop()
		c.Mu.Unlock()
		halt()
		c.WG.Wait()
		if release != nil {
			release()
		}
		c.board.Finish()
	})
}

// Requests returns a copy of every stream recorded, in order.
func (c *Core[R, C]) Requests() []R {
	return Snapshot(&c.Mu, func() []*R { return c.Reqs }, nil, c.spec.Clone)
}

// RequestsOn returns a copy of the streams recorded on connection i.
func (c *Core[R, C]) RequestsOn(i int) []R {
	return Snapshot(&c.Mu, func() []*R { return c.Reqs }, func(r *R) bool { return c.spec.ConnOf(r) == i }, c.spec.Clone)
}

// Count returns the number of streams recorded.
func (c *Core[R, C]) Count() int { return Locked(&c.Mu, func() int { return len(c.Reqs) }) }

// Accepted returns the number of connections accepted.
func (c *Core[R, C]) Accepted() int { return Locked(&c.Mu, func() int { return len(c.Conns) }) }

// Wait blocks until cond (called with Mu held) holds, the context ends,
// or the server has finished closing with cond still false
// (CoreSpec.ErrClosed). A context without a deadline gets
// CoreSpec.WaitTimeout.
func (c *Core[R, C]) Wait(ctx context.Context, cond func() bool) error {
	err := c.board.Wait(ctx, c.spec.WaitTimeout, c.spec.Name, true, cond)
	if errors.Is(err, ErrClosed) {
		return c.spec.ErrClosed
	}
	return err
}

// WaitOutside is Wait with cond called without Mu held, so that it may
// call the server's methods.
func (c *Core[R, C]) WaitOutside(ctx context.Context, cond func() bool) error {
	err := c.board.Wait(ctx, c.spec.WaitTimeout, c.spec.Name, false, cond)
	if errors.Is(err, ErrClosed) {
		return c.spec.ErrClosed
	}
	return err
}

// WaitDone waits until at least n streams are Done.
func (c *Core[R, C]) WaitDone(ctx context.Context, n int) error {
	return c.Wait(ctx, func() bool {
		done := 0
		for _, r := range c.Reqs {
			if c.spec.Done(r) {
				done++
			}
		}
		return done >= n
	})
}

// WaitCount waits until at least n streams have been recorded.
func (c *Core[R, C]) WaitCount(ctx context.Context, n int) error {
	return c.Wait(ctx, func() bool { return len(c.Reqs) >= n })
}

// WaitConns waits until at least n connections have been accepted.
func (c *Core[R, C]) WaitConns(ctx context.Context, n int) error {
	return c.Wait(ctx, func() bool { return len(c.Conns) >= n })
}

// WaitConnClosed waits until connection i has been accepted and is over.
func (c *Core[R, C]) WaitConnClosed(ctx context.Context, i int) error {
	return c.Wait(ctx, func() bool { return i < len(c.Conns) && c.spec.Closed(c.Conns[i]) })
}

// ScriptFor returns the script of connection i: conns[i], else def
// (which may be nil).
func ScriptFor[S any](conns []S, def *S, i int) *S {
	if i < len(conns) {
		return &conns[i]
	}
	return def
}
