package conformance

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// maxHold bounds how long a TapConn holds back a read result.
const maxHold = 5 * time.Second

// Dialer dials TCP connections for a client under test and keeps a
// TapConn for each, in dial order, so that a scenario can see what the
// client's stack did with them and delay what they read.
type Dialer struct {
	mu      sync.Mutex
	conns   []*TapConn
	changed chan struct{} // closed and replaced on every change
}

// NewDialer returns an empty Dialer.
func NewDialer() *Dialer { return &Dialer{changed: make(chan struct{})} }

// DialContext dials with a zero net.Dialer, as a zero http.Transport
// does, and records the connection.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &TapConn{Conn: c, d: d, closed: make(chan struct{})}
	d.mu.Lock()
	d.conns = append(d.conns, tc)
	d.notifyLocked()
	d.mu.Unlock()
	return tc, nil
}

func (d *Dialer) notifyLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// Count returns the number of connections dialed.
func (d *Dialer) Count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

// Conn returns connection i in dial order, or nil.
func (d *Dialer) Conn(i int) *TapConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if i < 0 || i >= len(d.conns) {
		return nil
	}
	return d.conns[i]
}

// wait blocks until cond holds or ctx ends.
func (d *Dialer) wait(ctx context.Context, cond func() bool) error {
	for {
		d.mu.Lock()
		ch := d.changed
		ok := cond()
		d.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitClosed waits until the client closed connection i.
func (d *Dialer) WaitClosed(ctx context.Context, i int) error {
	err := d.wait(ctx, func() bool { return i < len(d.conns) && d.conns[i].isClosed })
	if err != nil {
		return fmt.Errorf("conformance: waiting for the client to close connection %d: %w", i, err)
	}
	return nil
}

// WaitHeld waits until connection i holds back a read result (see
// TapConn.Freeze).
func (d *Dialer) WaitHeld(ctx context.Context, i int) error {
	err := d.wait(ctx, func() bool { return i < len(d.conns) && d.conns[i].holding })
	if err != nil {
		return fmt.Errorf("conformance: waiting for connection %d to hold a read: %w", i, err)
	}
	return nil
}

// CloseAll closes every connection, releasing held reads.
func (d *Dialer) CloseAll() {
	d.mu.Lock()
	conns := append([]*TapConn(nil), d.conns...)
	d.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// TapConn is a dialed connection that records when its client closed it
// and, once frozen, holds back what a read returns until the client
// writes again.
//
// Freeze models a close still in flight: the peer's FIN (or RST) is on the
// wire when the client sends its next request, so the client learns of it
// only after writing. The read result is the real one (EOF, a reset, or a
// TLS alert record); only its delivery is delayed, never past maxHold.
type TapConn struct {
	net.Conn
	d *Dialer

	// Guarded by d.mu.
	frozen   bool
	thaw     chan struct{} // closed when the freeze ends
	holding  bool          // a read result is held back now
	isClosed bool

	closeOnce sync.Once
	closed    chan struct{}
}

// Freeze makes the connection hold back the result of every read that
// completes from now on until the next Write returns.
func (c *TapConn) Freeze() {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if !c.frozen {
		c.frozen = true
		c.thaw = make(chan struct{})
	}
}

func (c *TapConn) unfreezeLocked() {
	if c.frozen {
		c.frozen = false
		close(c.thaw)
	}
}

// Read reads, and while frozen waits for the next Write before returning.
func (c *TapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.d.mu.Lock()
	if !c.frozen {
		c.d.mu.Unlock()
		return n, err
	}
	thaw := c.thaw
	c.holding = true
	c.d.notifyLocked()
	c.d.mu.Unlock()

	t := time.NewTimer(maxHold)
	select {
	case <-thaw:
	case <-c.closed:
	case <-t.C:
	}
	t.Stop()
	c.d.mu.Lock()
	c.holding = false
	c.d.notifyLocked()
	c.d.mu.Unlock()
	return n, err
}

// Write writes and ends a freeze.
func (c *TapConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.d.mu.Lock()
	c.unfreezeLocked()
	c.d.mu.Unlock()
	return n, err
}

// Close closes the connection and records that the client did.
func (c *TapConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		close(c.closed)
		c.d.mu.Lock()
		c.isClosed = true
		c.d.notifyLocked()
		c.d.mu.Unlock()
	})
	return err
}
