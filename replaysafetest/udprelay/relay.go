// Package udprelay is a UDP relay on 127.0.0.1 that holds every datagram
// for a fixed delay before passing it on, in both directions: a loopback
// with the round trip of a real path, for tests and benchmarks of QUIC
// clients (a handshake's round trip, and what 0-RTT saves of it, show).
//
// Everything it keeps is bounded: at most MaxPeers clients (one more
// evicts the client heard from least recently, as a NAT evicts a
// binding), and at most MaxQueued datagrams waiting in each direction of
// each client (one more is dropped, as a full router queue drops it).
package udprelay

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Bounds of a Relay.
const (
	// MaxPeers is the most client addresses a Relay serves at once.
	MaxPeers = 64
	// MaxQueued is the most datagrams waiting out their delay in one
	// direction of one client.
	MaxQueued = 1024
	// maxDatagram is the largest datagram relayed.
	maxDatagram = 1500
)

// Relay passes datagrams between clients and one target address, each
// one delay late. Close stops it.
type Relay struct {
	conn   *net.UDPConn
	target *net.UDPAddr
	delay  time.Duration

	mu      sync.Mutex
	peers   map[string]*peer
	closed  bool
	dropped int
	evicted int
	wg      sync.WaitGroup
}

type datagram struct {
	at   time.Time
	data []byte
}

// peer is one client: its own socket towards the target, and a queue in
// each direction.
type peer struct {
	addr     *net.UDPAddr
	upstream *net.UDPConn
	toTarget chan datagram
	toClient chan datagram
	seen     time.Time // the client's latest datagram; guarded by Relay.mu
	gone     bool      // evicted: its queues are closed
}

// New starts a relay on 127.0.0.1 to target (a UDP host:port) that delays
// each datagram by delay in each direction, so a round trip through it
// takes 2·delay more.
func New(target string, delay time.Duration) (*Relay, error) {
	t, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	r := &Relay{conn: conn, target: t, delay: delay, peers: map[string]*peer{}}
	r.wg.Add(1)
	go r.readClients()
	return r, nil
}

// Addr returns the address clients send to.
func (r *Relay) Addr() string { return r.conn.LocalAddr().String() }

// Dropped returns the number of datagrams dropped over a bound.
func (r *Relay) Dropped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Evicted returns the number of clients evicted to make room.
func (r *Relay) Evicted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.evicted
}

// Peers returns the number of clients served.
func (r *Relay) Peers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.peers)
}

// Close stops the relay and waits for its goroutines.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for _, p := range r.peers {
		r.dropLocked(p)
	}
	r.mu.Unlock()
	err := r.conn.Close()
	r.wg.Wait()
	return err
}

func (r *Relay) readClients() {
	defer r.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := r.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		p := r.peerFor(from)
		if p == nil {
			continue
		}
		r.enqueue(p, p.toTarget, buf[:n])
	}
}

// dropLocked closes p's socket and queues; its goroutines end.
func (r *Relay) dropLocked(p *peer) {
	if p.gone {
		return
	}
	p.gone = true
	p.upstream.Close()
	close(p.toTarget)
	close(p.toClient)
}

// peerFor returns from's peer, starting one when there is room; nil when
// the relay is closed or full.
func (r *Relay) peerFor(from *net.UDPAddr) *peer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if p := r.peers[from.String()]; p != nil {
		p.seen = time.Now()
		return p
	}
	if len(r.peers) >= MaxPeers {
		var oldest *peer
		for _, p := range r.peers {
			if oldest == nil || p.seen.Before(oldest.seen) {
				oldest = p
			}
		}
		r.dropLocked(oldest)
		delete(r.peers, oldest.addr.String())
		r.evicted++
	}
	up, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		r.dropped++
		return nil
	}
	p := &peer{addr: from, upstream: up, toTarget: make(chan datagram, MaxQueued), toClient: make(chan datagram, MaxQueued), seen: time.Now()}
	r.peers[from.String()] = p
	r.wg.Add(3)
	go r.deliver(p.toTarget, func(b []byte) error { _, err := up.Write(b); return err })
	go r.deliver(p.toClient, func(b []byte) error { _, err := r.conn.WriteToUDP(b, from); return err })
	go r.readTarget(p)
	return p
}

func (r *Relay) readTarget(p *peer) {
	defer r.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, err := p.upstream.Read(buf)
		if err != nil {
			return
		}
		r.enqueue(p, p.toClient, buf[:n])
	}
}

// enqueue queues a copy of b to leave one delay from now, or drops it
// when its queue is full or the relay closed.
func (r *Relay) enqueue(p *peer, q chan datagram, b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || p.gone {
		return
	}
	select {
	case q <- datagram{at: time.Now().Add(r.delay), data: append([]byte(nil), b...)}:
	default:
		r.dropped++
	}
}

// deliver sends the datagrams of q in order, each at its time, until q
// is closed.
func (r *Relay) deliver(q chan datagram, send func([]byte) error) {
	defer r.wg.Done()
	for d := range q {
		if wait := time.Until(d.at); wait > 0 {
			time.Sleep(wait)
		}
		if err := send(d.data); err != nil && errors.Is(err, net.ErrClosed) {
			for range q { // drain until the peer's eviction or Close closes q
			}
			return
		}
	}
}
