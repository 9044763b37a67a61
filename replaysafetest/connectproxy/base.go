package connectproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// Defaults for zero durations in the configurations.
const (
	// DefaultReadTimeout bounds reading a CONNECT or SOCKS request and the
	// TLS handshake.
	DefaultReadTimeout = replaysafetest.DefaultReadTimeout
	// DefaultWriteTimeout bounds each write.
	DefaultWriteTimeout = replaysafetest.DefaultWriteTimeout
	// DefaultDialTimeout bounds dialing a target or an upstream proxy.
	DefaultDialTimeout = 5 * time.Second
	// DefaultStall is how long a stall without a duration lasts, unless
	// Close ends it first.
	DefaultStall = 30 * time.Second
	// DefaultTunnelIdle closes a tunnel without an idle cut this long
	// after the last byte relayed to the client, so that a forgotten
	// tunnel ends by itself. It is not counted as a cut.
	DefaultTunnelIdle = time.Minute
)

// base is what both servers share: the listener, the set of open
// connections, counters, stalls and the tunnel relay.
type base struct {
	name         string
	ln           net.Listener
	ctx          context.Context // ends when Close starts
	cancel       context.CancelFunc
	wg           sync.WaitGroup
	closeOnce    sync.Once
	readTimeout  time.Duration
	writeTimeout time.Duration
	dialTimeout  time.Duration
	idleCut      time.Duration
	logf         func(format string, args ...any)

	mu       sync.Mutex
	closing  bool
	open     map[net.Conn]struct{}
	accepted int
	tunnels  int
	active   int
	cuts     int
}

func (b *base) init(name string, read, write, dial, idleCut time.Duration, logf func(string, ...any)) error {
	if read < 0 || write < 0 || dial < 0 || idleCut < 0 {
		return errors.New(name + ": negative duration in config")
	}
	b.name = name
	kit.Default(&read, DefaultReadTimeout)
	kit.Default(&write, DefaultWriteTimeout)
	kit.Default(&dial, DefaultDialTimeout)
	b.readTimeout, b.writeTimeout, b.dialTimeout = read, write, dial
	b.idleCut = idleCut
	b.logf = logf
	b.open = map[net.Conn]struct{}{}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.cancel()
		return fmt.Errorf("%s: listen: %w", name, err)
	}
	b.ln = ln
	return nil
}

func (b *base) log(format string, args ...any) {
	if b.logf != nil {
		b.logf(b.name+" "+b.ln.Addr().String()+": "+format, args...)
	}
}

// serve runs the accept loop; handle gets each connection and its index
// in accept order. The loop ends when Close closes the listener.
func (b *base) serve(handle func(c net.Conn, index int)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := b.ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					b.log("accept: %v", err)
				}
				return
			}
			b.mu.Lock()
			index := b.accepted
			b.accepted++
			b.mu.Unlock()
			if !b.track(c) {
				return
			}
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer b.release(c)
				handle(c, index)
			}()
		}
	}()
}

// track adds c to the open set, or closes it and reports false once
// Close has started.
func (b *base) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		c.Close()
		return false
	}
	b.open[c] = struct{}{}
	return true
}

// release closes c and drops it from the open set.
func (b *base) release(c net.Conn) {
	c.Close()
	b.mu.Lock()
	delete(b.open, c)
	b.mu.Unlock()
}

// swap replaces old by new in the open set: new wraps old.
func (b *base) swap(old, new net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.open[old]; ok {
		delete(b.open, old)
		b.open[new] = struct{}{}
	}
}

// close stops the listener, closes every open connection, ends every
// stall and waits for all goroutines.
func (b *base) close() error {
	var err error
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closing = true
		open := make([]net.Conn, 0, len(b.open))
		for c := range b.open {
			open = append(open, c)
		}
		b.mu.Unlock()
		b.cancel()
		if e := b.ln.Close(); e != nil && !errors.Is(e, net.ErrClosed) {
			err = e
		}
		for _, c := range open {
			c.Close()
		}
		b.wg.Wait()
	})
	return err
}

// stall waits d, or DefaultStall if d is zero; it reports false if Close
// ended it.
func (b *base) stall(d time.Duration) bool {
	if d <= 0 {
		d = DefaultStall
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-b.ctx.Done():
		return false
	}
}

// dial connects to addr, which must be a loopback address: the test
// proxy never reaches beyond the machine.
func (b *base) dial(addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !ip.IsLoopback()) {
		return nil, errNotLoopback
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.dialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if !b.track(c) {
		return nil, net.ErrClosed
	}
	return c, nil
}

var errNotLoopback = errors.New("target is not a loopback address")

func (b *base) write(c net.Conn, p []byte) error {
	c.SetWriteDeadline(time.Now().Add(b.writeTimeout))
	_, err := c.Write(p)
	return err
}

// relay joins client and target until either side ends. pending holds
// client bytes already read. With an idle cut, the tunnel is closed that
// long after the last byte relayed to the client (the first such byte
// counts from the tunnel's opening).
func (b *base) relay(client net.Conn, pending []byte, target net.Conn) {
	b.mu.Lock()
	b.active++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.active--
		b.mu.Unlock()
	}()
	defer b.release(target)

	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if len(pending) > 0 && b.write(target, pending) != nil {
			target.Close()
			return
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 && b.write(target, buf[:n]) != nil {
				target.Close()
				return
			}
			if err != nil {
				// The client is done sending: pass the half-close on and
				// let the other direction finish.
				if cw, ok := target.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				} else {
					target.Close()
				}
				return
			}
		}
	}()

	idle := b.idleCut
	if idle == 0 {
		idle = DefaultTunnelIdle
	}
	buf := make([]byte, 32<<10)
	for {
		target.SetReadDeadline(time.Now().Add(idle))
		n, err := target.Read(buf)
		if n > 0 && b.write(client, buf[:n]) != nil {
			break
		}
		if err != nil {
			if b.idleCut > 0 && kit.IsTimeout(err) {
				b.mu.Lock()
				b.cuts++
				b.mu.Unlock()
				b.log("cut idle tunnel after %v", b.idleCut)
			}
			break
		}
	}
	client.Close()
}

// Conns returns the number of connections accepted.
func (b *base) Conns() int { return kit.Locked(&b.mu, func() int { return b.accepted }) }

// Tunnels returns the number of tunnels opened.
func (b *base) Tunnels() int { return kit.Locked(&b.mu, func() int { return b.tunnels }) }

// ActiveTunnels returns the number of tunnels still relaying.
func (b *base) ActiveTunnels() int { return kit.Locked(&b.mu, func() int { return b.active }) }

// Cuts returns the number of tunnels closed by the idle cut.
func (b *base) Cuts() int { return kit.Locked(&b.mu, func() int { return b.cuts }) }

func (b *base) tunnelOpened() {
	b.mu.Lock()
	b.tunnels++
	b.mu.Unlock()
}

// Addr returns the listening address, "127.0.0.1:port".
func (b *base) Addr() string { return b.ln.Addr().String() }
