package pool

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// MuxState is a multiplexed connection's record in its Mux, guarded
// by the pool's lock.
type MuxState struct {
	Key     Key
	seq     uint64 // when its dial started, on the pool's clock (Mark), from 1
	failed  uint64 // the clock when the connection was first seen failing (FailMark), or 0
	resends int    // displaced requests' resends it took
	burst   uint64 // the failure mark of the first resend it took, or 0 (see learnedLimit.over)
	started int    // attempts it took, from the first
	served  int    // attempts that ended in a clean, complete exchange
	active  int    // attempts running on it
	// unsent counts the resends it took whose request is not yet on
	// the wire (Sent): while one waits, an original request that takes
	// a stream could get a lower stream ID than the resend's. Atomic:
	// the connection reports a write with its own lock held, which the
	// pool's lock must not wait behind (choice 35). It shares a word
	// with the four flags after it.
	unsent  atomic.Int32
	taught  bool // its loss under resends taught its route to spread them (ResendLost)
	retired bool // takes no new attempt; closes when active reaches 0
	pooled  bool // in Mux.conns
	shut    bool // closed, and its room in the connection limit given back
	// idleRef's timer, made once, closes the connection after the pool's
	// idleTimeout without an attempt; idleSince is when the last one
	// ended. It is set only when it is not already (idleArmed), never
	// per attempt: a timer that fires finds the connection busy, and
	// leaves the next attempt's end to set it, or idle for less than the
	// limit, and sets itself for the rest (idleExpired).
	idleRef   *idleRef
	idleSince time.Time
	idleArmed bool
	entry     IdleEntry // its place in the IdleCap while idle
}

// Active returns the attempts running on the connection; call it with
// the pool's lock held (from MuxConn.Reserve).
func (m *MuxState) Active() int { return m.active }

// MuxConn is what a Mux holds: an HTTP/2 or HTTP/3 connection.
type MuxConn interface {
	comparable
	// Mux returns the connection's pool record.
	Mux() *MuxState
	// Reserve takes room for one more attempt, or reports that there is
	// none now.
	Reserve() bool
	// Pending reports, after Reserve refused, whether it refused
	// because the connection was still waiting for what decides its
	// room (HTTP/2: the server's SETTINGS); an attempt then waits for it
	// instead of dialing.
	Pending() bool
	// Gone reports whether the connection will never take an attempt
	// again (closed, closing, or a GOAWAY came); the pool asks it after
	// Reserve refused, and of a connection it skips without asking
	// Reserve.
	Gone() bool
	// Close closes the connection; streams still running on it at the
	// stack's level end first (a graceful close). It calls closed, when
	// not nil, once the socket is closed, which may be after Close
	// returns (HTTP/2: a GOAWAY, then the socket): the pool gives the
	// connection's room in the limit (MaxConnsPerHost) back only then,
	// so that the limit counts the sockets really open.
	Close(closed func())
	// ReadSince reports whether the connection read a frame from its
	// peer after t: it was alive then. A stack that cannot tell reports
	// false.
	ReadSince(t time.Time) bool
}

// Mux holds the live multiplexed connections per route: an attempt
// takes room on the first pooled connection whose Reserve succeeds, and
// dials a new connection when none can (Acquire). It keeps at most
// maxIdle connections per route without a running attempt, and counts
// every connection in limit (the Transport's MaxConnsPerHost).
type Mux[C MuxConn] struct {
	keep        bool          // false: every connection closes once its attempts are done
	maxIdle     int           // idle connections kept per route, when keep
	idleTimeout time.Duration // > 0: close a connection idle this long
	limit       *Limit        // shared with the Transport's other pools
	cap         *IdleCap      // every pool's idle connections together; nil: no bound
	gate        dialGate      // attempts that missed the pool share a dial
	fire        func(C)       // the idle timers' function (idleExpired), made once, not per connection

	mu    sync.Mutex
	seq   uint64 // connections added so far
	conns map[Key][]C
	// perConn holds what a route's server showed it serves per
	// connection: the streams it accepted before a GOAWAY that left
	// later streams unprocessed (nginx keepalive_requests), and until
	// when that holds. The resends one GOAWAY displaced take no more
	// than that per connection, so that they spread over as many new
	// connections as they need instead of all moving to one that will
	// refuse most of them again; every attempt does once a second
	// connection's GOAWAY showed the same count (see Learn).
	perConn map[Key]learnedLimit
	// down holds the routes whose last dial for a waiting attempt
	// found them not answering (Acquire with a Redialing).
	down *Down
	// spread holds, per route whose new connections died young under
	// the resends they carried, how many resends one connection takes,
	// and until when (ResendLost).
	spread map[Key]learnedLimit
	// fails holds when the latest failure marks were taken (FailMark),
	// the latest at fails[(nfails-1)%len(fails)]: a connection older than
	// a mark that read a frame after it proved itself alive since the
	// failure, and may take the displaced requests' resends (Take).
	fails  [8]failMark
	nfails int
	// rejects holds the latest rejection marks (RejectMark), with the
	// connection each is of, the latest at
	// rejects[(nrejects-1)%len(rejects)]: a resend carrying one may take
	// any pooled connection but the one that rejected it (Take). Kept
	// here, not in MuxState, which a connection carries all its life
	// for the few that ever reject.
	rejects  [8]rejection[C]
	nrejects int
}

// rejection is a rejection mark (RejectMark) and the connection that
// rejected.
type rejection[C MuxConn] struct {
	mark uint64
	c    C
}

// failMark is a failure mark of the pool's clock and when it was taken.
type failMark struct {
	seq uint64
	at  time.Time
}

// failedAtLocked returns when the failure mark mark was taken, or false
// when mark is not a recent failure mark (0, one from Mark, or one
// pushed out by later failures): a connection older than it then never
// counts as proven.
func (p *Mux[C]) failedAtLocked(mark uint64) (time.Time, bool) {
	if mark == 0 {
		return time.Time{}, false
	}
	for _, f := range p.fails {
		if f.seq == mark {
			return f.at, true
		}
	}
	return time.Time{}, false
}

// Lost records that a connection for key died under a request (see
// Down.Lost).
func (p *Mux[C]) Lost(key Key) { p.down.Lost(key) }

// SetRedial sets the spacing of a down route's dials; call it before
// the pool is used.
func (p *Mux[C]) SetRedial(r Redial) { p.down.redial = r }

// learnedLimit is a route's per-connection stream budget seen in a
// GOAWAY, valid until expires. from is the connection that showed it
// last (its MuxState.seq), mark that connection's failure mark
// (FailMark), which the resends it displaced carry; confirmed: the
// GOAWAYs of two connections in a row showed it (Learn).
type learnedLimit struct {
	streams   int
	expires   time.Time
	from      uint64
	mark      uint64
	young     int // the young deaths in a row behind a spread (ResendLost)
	confirmed bool
}

// perConnTTL is how long a learned per-connection budget holds: a
// server restarting once must not cap its connections for long.
const perConnTTL = time.Minute

// minLearned is the smallest budget learned: a server that sends GOAWAY
// after a single stream is more likely going away (a restart, a drain)
// than serving one request per connection, and a budget of one would
// make HTTP/2 dial for every request for a minute.
const minLearned = 2

// maxLearned bounds the routes with a learned budget.
const maxLearned = 1024

func NewMux[C MuxConn](maxIdle int, idleTimeout time.Duration, limit *Limit, cap *IdleCap) *Mux[C] {
	p := &Mux[C]{keep: maxIdle > 0, maxIdle: maxIdle, idleTimeout: idleTimeout, limit: limit, cap: cap,
		conns: map[Key][]C{}, perConn: map[Key]learnedLimit{}, down: NewDown(Redial{}), spread: map[Key]learnedLimit{}}
	p.fire = p.idleExpired
	return p
}

// Learn records, for c's route, that its server accepted streams
// streams on c before a GOAWAY, when c had taken more than that: the
// GOAWAY displaced some (a server that drains without displacing
// anything teaches nothing).
//
// One GOAWAY is a candidate: it bounds the resends of the requests that
// GOAWAY displaced per connection, and the connections that take them
// (Take, learnedLimit.over), which is what the burst it caused needs.
// It bounds every attempt only once the route's next displacing GOAWAY
// shows the same count on another connection: a server with a
// per-connection request limit (nginx keepalive_requests) ends every
// connection at the same stream, while connections that end at random
// moments (a deploy, a load balancer's drain, a process recycled) show
// counts that differ, and a budget taken from one short life would make
// the route dial every few requests for perConnTTL.
func (p *Mux[C]) Learn(c C, streams int, now time.Time) {
	if streams < minLearned {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	key := c.Mux().Key
	if c.Mux().started <= streams {
		return
	}
	old, ok := p.perConn[key]
	if ok && old.from == c.Mux().seq {
		return // every stream it displaced tells the same GOAWAY
	}
	if !ok && len(p.perConn) >= maxLearned {
		clear(p.perConn)
	}
	confirmed := ok && old.streams == streams && now.Before(old.expires)
	p.perConn[key] = learnedLimit{streams: streams, expires: now.Add(perConnTTL), from: c.Mux().seq,
		mark: p.failMarkLocked(c), confirmed: confirmed}
}

// learnedLocked returns key's learned budget, if one holds (Learn).
func (p *Mux[C]) learnedLocked(key Key) (learnedLimit, bool) { return holding(p.perConn, key) }

// holding returns what m learned for key, if it has not expired; an
// expired entry leaves m.
func holding(m map[Key]learnedLimit, key Key) (learnedLimit, bool) {
	l, ok := m[key]
	if !ok {
		return l, false // the common case reads no clock
	}
	if time.Now().After(l.expires) {
		delete(m, key)
		return l, false
	}
	return l, true
}

// over reports whether connection m has taken the streams l allows for
// an attempt whose resend takes connections after mark after (0 for an
// original attempt): a confirmed budget bounds every connection; a
// candidate bounds the resends of the requests its GOAWAY displaced, and
// every attempt on a connection that took such a resend (burst) until
// the burst is through on it: every resend it took is on the wire
// (unsent) and it has completed as many exchanges as it took resends.
// The server counts the streams it serves in stream ID order, so until
// then an original request taking a stream beyond the budget could get
// a lower ID than a resend still waiting to be written, and the
// server's next GOAWAY would displace that resend a second time (RS08);
// after it, every original takes a higher ID than every resend, and
// the connection serves as any other instead of making each original
// beyond the budget dial.
func (l learnedLimit) over(m *MuxState, after uint64) bool {
	switch {
	case l.confirmed, l.mark != 0 && after == l.mark:
	case l.mark != 0 && m.burst == l.mark && (m.served < m.resends || m.unsent.Load() > 0):
	default:
		return false
	}
	return m.started >= l.streams
}

// Sent tells the pool that one displaced request's resend on c, which
// Take (or a dial's Add) counted as a resend, is on the wire or will
// never be: a burst's cap on c may lift once all of them are (see
// learnedLimit.over). Call it once per such resend; it takes no lock.
func (p *Mux[C]) Sent(c C) { c.Mux().unsent.Add(-1) }

// spreadLocked returns the resends a connection for key may take, or 0
// for no learned limit (none, or a candidate: ResendLost).
func (p *Mux[C]) spreadLocked(key Key) int {
	if l, ok := holding(p.spread, key); ok && l.confirmed {
		return l.streams
	}
	return 0
}

// ResendLost tells the pool that a displaced request's resend on c
// failed with c gone under it (closed, or a GOAWAY). When c carried
// other resends too, they were lost with it, and RS08 allows none of
// them a third copy. When c also died young, having completed fewer
// exchanges than the resends it took, and so did the connections lost
// this way before it on the route (spreadAfter in a row, each dialed
// after the one before died: a server or network that kills
// connections soon after they open; connections that die together, as
// in a restart, are one event), the route learns to spread its
// resends, for perConnTTL: a connection takes at most half as many
// resends as c did, down to one (each resend a connection of its own).
//
// Fewer young deaths are a candidate only, and a connection that proved
// itself first (it completed at least as many exchanges as it took
// resends) and then died clears it: connections whose lives are drawn
// at random die young now and then, and spreading every later burst
// over many new connections would answer each such end with a storm of
// handshakes. Each connection teaches this once.
func (p *Mux[C]) ResendLost(c C, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := c.Mux()
	if m.taught || m.resends < 2 || !c.Gone() {
		return
	}
	m.taught = true
	old, ok := p.spread[m.Key]
	if m.served >= m.resends {
		if ok && !old.confirmed {
			delete(p.spread, m.Key)
		}
		return
	}
	young := 1
	if ok && now.Before(old.expires) {
		if !old.confirmed && m.seq <= old.from {
			return // dialed before the last young death: one event, not two
		}
		young = old.young + 1
	}
	if !ok && len(p.spread) >= maxLearned {
		clear(p.spread)
	}
	p.spread[m.Key] = learnedLimit{streams: max(1, m.resends/2), expires: now.Add(perConnTTL), from: p.seq,
		young: young, confirmed: young >= spreadAfter}
}

// spreadAfter is how many young deaths in a row (ResendLost) teach a
// route to spread its resends. Under random connection lives with a
// mean of 500 requests about one new connection in eight dies before
// it served the 64 resends a burst gave it; two such deaths in a row
// still came by chance in one soak run in four, while a server that
// kills connections soon after they open makes nearly every death
// young and teaches the spread within three.
const spreadAfter = 3

// spreading reports whether key's displaced requests spread their
// resends (ResendLost) while the route answers: each then dials without
// waiting for another's dial.
func (p *Mux[C]) spreading(key Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.down.IsDown(key) && p.spreadLocked(key) > 0
}

// Mark returns the pool's clock, which ticks when a dial starts and when
// a connection joins (and twice at a rejection mark, RejectMark): a
// connection whose dial started later has a greater seq. A resend takes
// only connections whose dial started after its failure was seen (see
// Take): never the one that failed, nor one that may have been
// established to the same dying server or over the same broken path
// before the failure.
func (p *Mux[C]) Mark() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// FailMark returns the pool's clock when c was first seen failing: a
// resend after c's failure takes only a connection whose dial started
// after it (Take). Every request displaced by one connection's death
// gets the same mark, however late it saw the death, so that they all
// may share the redial the first of them started.
func (p *Mux[C]) FailMark(c C) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failMarkLocked(c)
}

// failMarkLocked is FailMark with the pool's lock held.
func (p *Mux[C]) failMarkLocked(c C) uint64 {
	m := c.Mux()
	if m.failed == 0 {
		m.failed = p.seq
		if m.failed == 0 {
			p.seq++ // 0 means unset: never the first mark
			m.failed = p.seq
		}
		if _, ok := p.failedAtLocked(m.failed); !ok {
			p.fails[p.nfails%len(p.fails)] = failMark{seq: m.failed, at: time.Now()}
			p.nfails++
		}
	}
	return m.failed
}

// RejectMark returns the mark of c's rejection of one request alone, c
// staying open with no GOAWAY (HTTP/3's H3_REQUEST_REJECTED): the
// resend after it takes any other pooled connection that may take an
// attempt and never failed itself (FailMark), whenever it was dialed,
// or else one whose dial started after the mark; never c (Take;
// spec/choices.md, choice 22). c's later rejections share its first
// one's mark while it is among the latest eight, and so a redial, as
// the requests one failure displaced share one (FailMark). The mark is
// a tick of the clock that no dial and no other mark reads, so a resend
// carrying it is this rejection's. The pool keeps the latest eight
// rejecting connections' records until later rejections push them out.
func (p *Mux[C]) RejectMark(c C) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rejects {
		if r.mark != 0 && r.c == c {
			return r.mark
		}
	}
	p.seq++
	mark := p.seq
	p.seq++ // later marks and dials read the clock past it
	p.rejects[p.nrejects%len(p.rejects)] = rejection[C]{mark: mark, c: c}
	p.nrejects++
	return mark
}

// rejecterLocked returns the connection whose rejection mark is mark
// (RejectMark), if mark is a recent one; one pushed out by later
// rejections reads as any other mark, whose resend takes only newer
// connections.
func (p *Mux[C]) rejecterLocked(mark uint64) (C, bool) {
	if mark != 0 {
		for _, r := range p.rejects {
			if r.mark == mark {
				return r.c, true
			}
		}
	}
	var zero C
	return zero, false
}

// Tick advances the pool's clock as a dial starts, and returns the
// dial's place on it, for Add.
func (p *Mux[C]) Tick() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	return p.seq
}

// Take reserves room for one attempt on a pooled connection for key whose
// dial started after mark after, or is same (a connection whose
// refusal of one stream left it healthy), or, when after is a failure
// mark (FailMark), read a frame from its peer after the failure was
// seen: a connection that proved itself alive since then, which the
// failure did not reach (spec/choices.md, choice 23), or, when after is
// a rejection mark (RejectMark), is any but the rejecting one: a
// rejection judged one request on one connection (choice 22). Neither
// older kind ever failed itself (FailMark). It reports whether that
// connection served an earlier exchange (reused as fsm means it, not
// merely carrying another attempt right now); it returns the zero C when
// none has room. Connections that are gone leave the pool on the way:
// those met before the one that takes the attempt; any behind it leave
// at a later take, and so does one this attempt may not take (older
// than its mark, or at a learned limit) that is gone with no attempt on
// it, which would otherwise count as idle against the route's cap.
//
// pending reports, when none had room, that a candidate was waiting for
// its SETTINGS. displaced marks a displaced request's resend: it counts
// against the route's learned spread (ResendLost).
func (p *Mux[C]) Take(key Key, after uint64, same C, displaced bool) (got C, reused, pending bool) {
	var dead []C
	defer func() {
		for _, c := range dead {
			p.shut(c)
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.conns[key]
	kept := list[:0]
	learned, bounded := p.learnedLocked(key)
	spread := 0
	if displaced {
		spread = p.spreadLocked(key)
	}
	failedAt, proof := p.failedAtLocked(after)
	rejecter, rejection := p.rejecterLocked(after)
	var zero C
	for _, c := range list {
		switch m := c.Mux(); {
		case got != zero:
			kept = append(kept, c)
		case m.seq <= after && c != same &&
			!(m.failed == 0 && (proof && c.ReadSince(failedAt) || rejection && c != rejecter)) ||
			bounded && learned.over(m, after) ||
			spread > 0 && m.resends >= spread:
			if m.active == 0 && c.Gone() {
				// Not for this attempt, and for none again: it leaves
				// now, or it would count as idle against the route's cap
				// (Done) until a take that may use it passes it.
				m.retired, m.pooled = true, false
				dead = append(dead, c)
			} else {
				kept = append(kept, c)
			}
		case m.active == 0 && m.idleArmed && time.Since(m.idleSince) >= p.idleTimeout:
			// Idle for the whole limit, its timer late: as Idle.Get,
			// never handed out.
			m.retired, m.pooled = true, false
			dead = append(dead, c)
		case c.Reserve():
			got = c
			if m.active == 0 {
				p.cap.remove(&m.entry) // idle no more
			}
			m.active++
			m.started++
			if displaced {
				m.resends++
				m.unsent.Add(1)
				if m.burst == 0 {
					m.burst = after
				}
			}
			kept = append(kept, c)
		case c.Gone():
			m.retired, m.pooled = true, false
			if m.active == 0 {
				dead = append(dead, c)
			}
		default:
			pending = pending || c.Pending()
			kept = append(kept, c) // full: at the server's concurrency limit
		}
	}
	switch {
	case len(kept) == len(list):
		// Nothing left the list: it is already stored as it is.
	case len(kept) == 0:
		clear(list)
		delete(p.conns, key)
	default:
		clear(list[len(kept):])
		p.conns[key] = kept
	}
	if got == zero {
		return zero, false, pending
	}
	return got, got.Mux().served > 0, false
}

// add registers c, whose dial started at tick (Tick), with one attempt
// running on it. The clock ticks again, so that an attempt that took
// nothing before sees that a connection joined (dialTurn).
func (p *Mux[C]) add(c C, tick uint64) { p.addWith(c, tick, false) }

// addWith is add; displaced marks the attempt on c as a displaced
// request's resend (see Take).
func (p *Mux[C]) addWith(c C, tick uint64, displaced bool) { p.addFrom(c, tick, displaced, 0) }

// addFrom is addWith for a displaced request's resend that takes
// connections after mark after (see Take).
func (p *Mux[C]) addFrom(c C, tick uint64, displaced bool, after uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := c.Mux()
	m.active, m.started = 1, 1
	if displaced {
		m.resends, m.burst = 1, after
		m.unsent.Store(1)
	}
	p.seq++
	m.seq = tick
	p.down.Up(m.Key)
	if !p.keep {
		m.retired = true
		return
	}
	m.pooled = true
	p.conns[m.Key] = append(p.conns[m.Key], c)
}

// AddIdle registers c, dialed ahead of any attempt (the HTTP/3 race)
// from tick (Tick) on, with no attempt running on it.
func (p *Mux[C]) AddIdle(c C, tick uint64) {
	p.add(c, tick)
	p.mu.Lock()
	c.Mux().started = 0
	p.mu.Unlock()
	p.Done(c, false)
}

// Done ends one attempt on c; clean reports a complete exchange. A
// connection left idle beyond the route's idle cap closes.
func (p *Mux[C]) Done(c C, clean bool) {
	p.mu.Lock()
	m := c.Mux()
	m.active--
	if clean {
		m.served++
	}
	if m.active == 0 && !m.retired {
		if l, ok := p.learnedLocked(m.Key); ok && l.over(m, 0) ||
			p.idleLocked(m.Key) > p.maxIdle {
			p.retireLocked(c) // spent, or beyond the idle cap
		}
	}
	closeIt := m.retired && m.active == 0
	idle := !closeIt && m.active == 0
	if idle && p.idleTimeout > 0 {
		m.idleSince = time.Now()
		p.armIdleLocked(c, p.idleTimeout)
	}
	if idle && p.cap != nil && m.entry.evict == nil {
		m.entry.evict = func() { p.evictIdle(c) } // made once per connection
	}
	p.mu.Unlock()
	if closeIt {
		p.shut(c)
		return
	}
	if idle {
		evictAll(p.cap.add(&m.entry))
	}
	p.limit.Notify(m.Key) // room for a stream: wake an attempt waiting at the limit
}

// evictIdle closes c if no attempt runs on it: the IdleCap chose it.
func (p *Mux[C]) evictIdle(c C) {
	p.mu.Lock()
	m := c.Mux()
	idle := m.active == 0 && !m.retired
	if idle {
		p.retireLocked(c)
	}
	p.mu.Unlock()
	if idle {
		p.shut(c)
	}
}

// idleLocked returns the pooled connections for key without a running
// attempt.
func (p *Mux[C]) idleLocked(key Key) int {
	n := 0
	for _, c := range p.conns[key] {
		if c.Mux().active == 0 {
			n++
		}
	}
	return n
}

// shut closes c once and gives its room in the connection limit back.
func (p *Mux[C]) shut(c C) {
	p.mu.Lock()
	m := c.Mux()
	first := !m.shut
	m.shut = true
	p.stopIdleLocked(m)
	m.idleRef.drop()
	p.cap.remove(&m.entry)
	p.mu.Unlock()
	if first {
		key := m.Key
		c.Close(func() { p.limit.Closed(key) })
	}
}

// armIdleLocked sets c's idle timer to fire after d, unless it is set
// already; the first call makes it.
func (p *Mux[C]) armIdleLocked(c C, d time.Duration) {
	m := c.Mux()
	switch {
	case m.idleRef == nil:
		m.idleRef = startIdleTimer(c, d, p.fire)
	case !m.idleArmed:
		m.idleRef.timer.Reset(d)
	}
	m.idleArmed = true
}

func (p *Mux[C]) stopIdleLocked(m *MuxState) {
	m.idleRef.stop()
	m.idleArmed = false
}

// idleExpired is c's idle timer firing: it closes c when c is still
// idle, and has been for the whole limit; an idle c that was used since
// the timer was set gets the rest of its limit.
func (p *Mux[C]) idleExpired(c C) {
	p.mu.Lock()
	m := c.Mux()
	m.idleArmed = false
	idle := false
	if m.active == 0 && !m.retired {
		if rest := p.idleTimeout - time.Since(m.idleSince); rest > 0 {
			p.armIdleLocked(c, rest)
		} else {
			idle = true
			p.retireLocked(c)
		}
	}
	p.mu.Unlock()
	if idle {
		p.shut(c)
	}
}

// Retire takes c out of the pool: no new attempt runs on it, and it
// closes once its running attempts are done.
func (p *Mux[C]) Retire(c C) {
	p.mu.Lock()
	p.retireLocked(c)
	idle := c.Mux().active == 0
	p.mu.Unlock()
	if idle {
		p.shut(c)
	}
}

func (p *Mux[C]) retireLocked(c C) {
	m := c.Mux()
	m.retired = true
	p.stopIdleLocked(m)
	if !m.pooled {
		return
	}
	m.pooled = false
	list := p.conns[m.Key]
	for i, x := range list {
		if x == c {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(p.conns, m.Key)
	} else {
		p.conns[m.Key] = list
	}
}

// CloseIdle closes every pooled connection without a running attempt.
func (p *Mux[C]) CloseIdle() {
	p.mu.Lock()
	var idle []C
	for _, list := range p.conns {
		for _, c := range list {
			if c.Mux().active == 0 {
				idle = append(idle, c)
			}
		}
	}
	for _, c := range idle {
		p.retireLocked(c)
	}
	p.mu.Unlock()
	for _, c := range idle {
		p.shut(c)
	}
}

// IdleCount returns the number of pooled connections without a running
// attempt.
func (p *Mux[C]) IdleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for key := range p.conns {
		n += p.idleLocked(key)
	}
	return n
}

// settleWait is how soon an attempt waiting for a new connection's room
// (HTTP/2: its SETTINGS) looks again; each later look waits twice as
// long, up to maxSettleWait. SETTINGS come within a round trip, but a
// server may never send them, and every look takes the pool's lock.
const (
	settleWait    = time.Millisecond
	maxSettleWait = 16 * time.Millisecond
)

// Acquire is how an attempt gets a multiplexed connection (HTTP/2,
// HTTP/3): room on a pooled one that take finds for (after, same), else
// a new one from dial, which add registers. Attempts that miss the pool
// together share one dial through the gate, resends included: the others
// wait for it (under their own acquisition deadline), then try the pool
// again, and dial themselves only when the new connection cannot take
// them either; so the requests one connection's GOAWAY or death
// displaced share new connections up to their stream limit. A route at
// the connection limit waits for room. check, when set, may end the
// search with an error after take found nothing (for example ALPN's
// answer under ProtocolNegotiate).
//
// w says what a failed dial means (Redialing): for a resend of a
// displaced request, a dial that found the route not answering yet (a
// server restarting refuses its port) sent nothing, so instead of
// failing the attempt marks the route down and every displaced attempt
// for it waits (spec/choices.md, choice 23): the next dial, still one at
// a time, comes after the route's Redial spacing, or a connection
// another attempt added ends the wait. Only the attempt's context (its
// acquisition deadline) ends it otherwise. Any other attempt waits so
// too while the route is restarting (down, or a connection lost under a
// request, less than RestartWindow ago: Down.Restarting); otherwise its
// failed dial is final.
func (p *Mux[C]) Acquire(ctx context.Context, key Key, after uint64, same C,
	check func() error, dial func() (C, error), w Redialing) (C, bool, error) {
	var zero C
	var settle *time.Timer
	every := settleWait
	defer func() {
		if settle != nil {
			settle.Stop()
		}
	}()
	// waiting: a failed dial that found the route not answering leaves
	// the attempt waiting for it.
	var waiting bool
	// ended is the error of a waiting attempt whose context ended while
	// it waited: the cause, and the route's last failed dial.
	ended := func() error {
		if waiting {
			if last := p.down.Err(key); last != nil {
				return &DownError{Cause: context.Cause(ctx), LastDial: last}
			}
		}
		return context.Cause(ctx)
	}
	for {
		waiting = w.NotAnswering != nil && (w.Displaced || p.down.Restarting(key))
		seen := p.Mark()
		c, reused, pending := p.Take(key, after, same, w.Displaced)
		if c != zero {
			return c, reused, nil
		}
		if pending {
			// A new connection will know its room within a round trip.
			if settle == nil {
				settle = time.NewTimer(every)
			}
			select {
			case <-settle.C:
				every = min(2*every, maxSettleWait)
				settle.Reset(every)
				continue
			case <-ctx.Done():
				return zero, false, context.Cause(ctx)
			}
		}
		if check != nil {
			if err := check(); err != nil {
				return zero, false, err
			}
		}
		var wait <-chan struct{}
		var lead func()
		if w.Displaced && p.spreading(key) {
			lead = func() {} // spreading: no waiting on another's dial
		} else {
			wait, lead = p.dialTurn(key, seen)
		}
		switch {
		case wait == nil && lead == nil:
			continue
		case lead == nil:
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return zero, false, ended()
			}
		}
		if waiting {
			// The dial before ours may have failed just now: the route's
			// spacing holds for us too.
			if d, up := p.down.Wait(key); d > 0 {
				lead()
				if err := waitUp(ctx, d, up); err != nil {
					return zero, false, ended()
				}
				continue
			}
		}
		if !p.limit.TryOpen(key) {
			lead()
			if err := p.limit.Wait(ctx, key); err != nil {
				return zero, false, err
			}
			continue
		}
		c, err := p.dialCounted(key, dial, w.Displaced, after)
		down := err != nil && waiting && ctx.Err() == nil && w.NotAnswering(err)
		if down {
			p.down.Failed(key, err) // before lead: a waiter woken by it sees the route down
		}
		lead()
		if down {
			continue
		}
		return c, false, err
	}
}

// Redialing says what an attempt's failed dial means to Acquire.
type Redialing struct {
	// NotAnswering reports whether a dial that failed with err found the
	// route not answering yet (it sent nothing, and the next may
	// succeed); nil means every failed dial is final.
	NotAnswering func(err error) bool
	// Displaced marks the resend of a request displaced by its
	// connection's failure or GOAWAY: it waits for a down route until
	// its context ends, takes only connections that may carry resends
	// (Take), and counts as a resend on a connection it dials.
	Displaced bool
}

// DownError ends an acquisition whose context ended while it waited for
// a route that did not answer: the context's cause, and the error of the
// last dial it saw fail.
type DownError struct {
	Cause, LastDial error
}

func (e *DownError) Error() string {
	return e.Cause.Error() + "; the route's last dial: " + e.LastDial.Error()
}

func (e *DownError) Unwrap() []error { return []error{e.Cause, e.LastDial} }

// waitUp waits d, or until up is closed (a connection for the route
// joined the pool), or ctx ends, and returns ctx's cause then.
func waitUp(ctx context.Context, d time.Duration, up <-chan struct{}) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-up:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// dialTurn is acquire's next step when take, run after mark returned
// seen, found no room for key. It returns a channel to wait on while
// another attempt dials for key, or lead when the caller is to dial (and
// call lead once done), or neither when a connection joined the pool
// since seen: that one's dial may have ended, and its gate gone, between
// take and now, and the caller takes again rather than dialing for room
// the pool may have.
func (p *Mux[C]) dialTurn(key Key, seen uint64) (<-chan struct{}, func()) {
	wait, lead := p.gate.join(key)
	if lead != nil && p.Mark() != seen {
		lead()
		return nil, nil
	}
	return wait, lead
}

// dialGate lets original attempts that missed the pool for one key
// share a dial.
type dialGate struct {
	mu      sync.Mutex
	dialing map[Key]chan struct{} // closed when the dial for the key ends
}

// join returns, when another attempt is dialing for key, a channel closed
// when that dial ends (the caller then tries the pool again); otherwise
// the caller dials, and calls the returned function once the connection
// is added or the dial failed.
func (g *dialGate) join(key Key) (<-chan struct{}, func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch, ok := g.dialing[key]; ok {
		return ch, nil
	}
	if g.dialing == nil {
		g.dialing = map[Key]chan struct{}{}
	}
	ch := make(chan struct{})
	g.dialing[key] = ch
	return nil, func() {
		g.mu.Lock()
		delete(g.dialing, key)
		g.mu.Unlock()
		close(ch)
	}
}

// dialCounted dials a connection for key, whose room in the limit the
// caller took, and adds it with one attempt running (a displaced
// request's resend when displaced); a failed dial gives the room back.
func (p *Mux[C]) dialCounted(key Key, dial func() (C, error), displaced bool, after uint64) (C, error) {
	tick := p.Tick()
	c, err := dial()
	if err != nil {
		p.limit.Closed(key)
		return c, err
	}
	p.addFrom(c, tick, displaced, after)
	return c, nil
}
