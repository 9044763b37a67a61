package bench

import (
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"time"
)

// The memory measurements. Each one brings the process into a state, then
// reads runtime.MemStats after two garbage collections: HeapAlloc, the
// live heap objects, compared with the same reading before the state was
// built; and the number of goroutines, whose stacks (8 KiB at least each)
// are counted apart because the runtime keeps dead goroutines' stacks for
// reuse, which makes a stack byte count noise. The server runs in the same
// process, so its share is measured too, with connections that do nothing
// (Protocol.Bare), and subtracted; what remains is the client's, give or
// take the bare connection's own few hundred bytes.

const setupTimeout = 10 * time.Second

// settle is how long a measurement lets background work finish (x/net
// returns stream buffers to its pools after the caller saw the end of a
// body) before it reads the state. Setup only; never a timed section.
const settle = 50 * time.Millisecond

// Held is what the process holds at one moment.
type Held struct {
	Heap       float64 // live heap bytes
	Goroutines float64
}

// Per returns (h - before) / n.
func (h Held) Per(before Held, n int) Held {
	return Held{Heap: (h.Heap - before.Heap) / float64(n), Goroutines: (h.Goroutines - before.Goroutines) / float64(n)}
}

// settleFor is how long a measurement of p lets background work finish:
// Protocol.Settle, or settle.
func settleFor(p Protocol) time.Duration {
	if p.Settle > 0 {
		return p.Settle
	}
	return settle
}

// quiesce sleeps d, then waits until the goroutine count stops moving: what an earlier
// measurement tore down (connections a client closed, whose loops exit
// on their own) must be gone before a new one reads its baseline, or the
// memory it frees lands in the new measurement as a negative share.
func quiesce(d time.Duration) {
	time.Sleep(d)
	deadline := time.Now().Add(time.Second)
	last := runtime.NumGoroutine()
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == last {
			return
		}
		last = n
	}
}

// MedianHeld returns the median heap and goroutine counts of hs, each
// taken on its own.
func MedianHeld(hs []Held) Held {
	var heap, gs []float64
	for _, h := range hs {
		heap, gs = append(heap, h.Heap), append(gs, h.Goroutines)
	}
	return Held{Heap: median(heap), Goroutines: median(gs)}
}

// held returns the live heap after a full collection and the number of
// goroutines.
func held() Held {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return Held{Heap: float64(m.HeapAlloc), Goroutines: float64(runtime.NumGoroutine())}
}

// ServerPerConn returns what the server of p (and a bare client
// connection) holds per open connection, measured over n bare
// connections to the server IdleConn measures with.
func ServerPerConn(p Protocol, n int) (Held, error) {
	srv, err := p.startIdle(n)
	if err != nil {
		return Held{}, err
	}
	defer srv.Close()
	quiesce(settleFor(p))
	before := held()
	conns, err := p.Bare(srv, n)
	if err != nil {
		return Held{}, err
	}
	defer conns.Close()
	if err := waitFor(setupTimeout, func() bool { return srv.Ready() == n }); err != nil {
		return Held{}, err
	}
	time.Sleep(settleFor(p))
	return held().Per(before, n), nil
}

// openHeld sends n requests through rt and keeps them in flight at a
// closed gate: one at a time, each waiting until the previous one reached
// the server, so that a multiplexing client has seen the server's
// concurrency limit before it picks a connection. Request i goes to the
// server's origin i modulo their number. It returns the gate and a
// function that opens it and waits for the n calls.
func openHeld(srv Server, rt RoundTripper, n int, w Workload) (*Gate, func() error, error) {
	base, err := url.Parse(srv.URL())
	if err != nil {
		return nil, nil, err
	}
	var origins []*url.URL
	for _, addr := range srv.Addrs() {
		u := *base
		u.Host = addr
		origins = append(origins, &u)
	}
	g := NewGate()
	srv.SetGate(g)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	finish := func() error {
		g.Open()
		wg.Wait()
		srv.SetGate(nil)
		if len(errs) > 0 {
			return errs[0]
		}
		return nil
	}
	for i := range n {
		u := origins[i%len(origins)]
		wg.Go(func() {
			if err := Do(rt, NewRequest(u, w)); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
		if err := waitFor(setupTimeout, func() bool { return g.Arrived() >= i+1 }); err != nil {
			finish()
			return nil, nil, fmt.Errorf("%w: %d of %d requests held", errNotReady, g.Arrived(), n)
		}
	}
	return g, finish, nil
}

// IdleConn returns what client c holds per idle pooled connection to the
// server of p, with the server's share subtracted (server, from
// ServerPerConn), and the number of connections it measured over. It
// opens up to n connections by keeping n requests in flight at a server
// that allows one stream per connection, or (Protocol.StartOrigins) at n
// origins, one request each.
func IdleConn(p Protocol, c Client, n int, server Held) (Held, int, error) {
	srv, err := p.startIdle(n)
	if err != nil {
		return Held{}, 0, err
	}
	defer srv.Close()
	rt := c.New(Env{TLS: srv.ClientTLS(), MaxIdle: n})
	defer Release(rt)
	quiesce(settleFor(p))
	before := held()
	_, finish, err := openHeld(srv, rt, n, Workloads[0])
	if err != nil {
		return Held{}, 0, err
	}
	if err := finish(); err != nil {
		return Held{}, 0, err
	}
	conns := srv.Ready()
	if conns == 0 {
		return Held{}, 0, errNotReady
	}
	time.Sleep(settleFor(p))
	per := held().Per(before, conns)
	return Held{Heap: per.Heap - server.Heap, Goroutines: per.Goroutines - server.Goroutines}, conns, nil
}

// InFlight returns what client c holds per request in flight beyond its
// connection: the connections are opened and pooled first (n for
// HTTP/1.1, where each request needs its own; one for a multiplexed
// protocol), then n requests are held at the server. The calling
// goroutine is not counted (every client needs one); the server's share
// (a held answer) is a few bytes and is not subtracted.
func InFlight(p Protocol, c Client, n int, w Workload) (Held, error) {
	srv, err := p.Start(0)
	if err != nil {
		return Held{}, err
	}
	defer srv.Close()
	rt := c.New(Env{TLS: srv.ClientTLS(), MaxIdle: n})
	defer Release(rt)
	warm := n
	if p.Multiplexed {
		warm = 1
	}
	_, finish, err := openHeld(srv, rt, warm, w)
	if err != nil {
		return Held{}, err
	}
	if err := finish(); err != nil {
		return Held{}, err
	}
	quiesce(settleFor(p))
	before := held()
	_, finish, err = openHeld(srv, rt, n, w)
	if err != nil {
		return Held{}, err
	}
	time.Sleep(settleFor(p))
	per := held().Per(before, n)
	per.Goroutines-- // the caller's
	if err := finish(); err != nil {
		return Held{}, err
	}
	return per, nil
}
