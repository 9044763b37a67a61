package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/adapters/h3"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/plan"
	"github.com/replaysafe/replaysafe/internal/pool"
)

// errFallbackTCP means plan.PreferHTTP3 could not get a QUIC
// connection for the call's first attempt: the call goes over TCP,
// nothing of it having been sent.
var errFallbackTCP = errors.New("replaysafe: no HTTP/3 connection; falling back to TCP")

// newH3Factory returns the http3.Transport whose only use is
// NewClientConn: its RoundTrip, and with it quic-go's retry of requests
// on a connection that could not take them, never runs.
func newH3Factory(cfg Config) *http3.Transport {
	t := &http3.Transport{DisableCompression: cfg.DisableCompression}
	if cfg.MaxResponseHeaderBytes > 0 && cfg.MaxResponseHeaderBytes <= 1<<31-1 {
		t.MaxResponseHeaderBytes = int(cfg.MaxResponseHeaderBytes)
	}
	return t
}

// QUIC liveness without a QUICConfig: a connection sends a keep-alive
// PING once it has received nothing for QUICKeepAlive, and is declared
// dead (quic.IdleTimeoutError) when nothing arrives for QUICIdleTimeout
// after its last ack-eliciting packet. A peer that vanished (a server
// killed or restarted without a stateless reset) is then found within
// QUICKeepAlive + QUICIdleTimeout of its last packet, 5 s, instead of
// quic-go's 30 s idle timeout, as the HTTP/2 connection's liveness PING
// finds one within 4 s; a live peer acknowledges the PINGs and keeps
// the connection. The price is a PING a second on an idle connection
// until IdleConnTimeout closes it.
const (
	QUICKeepAlive   = time.Second
	QUICIdleTimeout = 4 * time.Second
)

// quicConfig returns the QUIC configuration of a new connection observed
// by w: a clone of Options.QUICConfig with w as its tracer, or the
// liveness defaults above.
func (t *Transport) quicConfig(w *h3.Watch) *quic.Config {
	var cfg *quic.Config
	if t.cfg.QUICConfig != nil {
		cfg = t.cfg.QUICConfig.Clone()
	} else {
		cfg = &quic.Config{KeepAlivePeriod: QUICKeepAlive, MaxIdleTimeout: QUICIdleTimeout}
	}
	cfg.MaxIncomingStreams = -1 // servers open no request streams (RFC 9114 §6.1)
	cfg.Tracer = w.Tracer
	return cfg
}

// h3Addr returns the UDP address to dial for key: the advertised
// alternative's port under plan.DiscoverHTTP3, else key's own.
func (t *Transport) h3Addr(key pool.Key) (string, error) {
	if t.cfg.Protocol != plan.DiscoverHTTP3 {
		return key.Addr, nil
	}
	alt, ok := t.altSvc.Lookup(key.Addr, time.Now())
	if !ok {
		return "", errNoAltSvc
	}
	return net.JoinHostPort(key.Host, strconv.Itoa(int(alt.Port))), nil
}

// errNoAltSvc means an origin's HTTP/3 advertisement expired between the
// route's choice and the dial; the call falls back to TCP.
var errNoAltSvc = errors.New("replaysafe: the origin's Alt-Svc advertisement of HTTP/3 expired")

// learnAltSvc records what a response over TCP from key's origin
// advertised, under plan.DiscoverHTTP3.
func (t *Transport) learnAltSvc(key pool.Key, resp *http.Response) {
	if t.cfg.Protocol == plan.DiscoverHTTP3 && key.Scheme == "https" && resp.ProtoMajor < 3 {
		t.altSvc.Learn(key.Addr, key.Host, resp.Header, time.Now())
	}
}

// runH3 is call.run for HTTP/3: a try's wire attempts (attempts), a
// resend at once on a connection opened after the failure.
func (tr *try) runH3(start resend) (*http.Response, error) {
	if err := checkStreamHeader("HTTP/3", tr.call.req.Header); err != nil {
		return tr.refuse(err)
	}
	return tr.attempts((*try).attemptH3, start)
}

// markH3Broken records that key's QUIC connection could not be
// established: its route keeps to TCP for Config.H3RetryAfter, and its Alt-Svc
// advertisement is dropped.
func (t *Transport) markH3Broken(key pool.Key) {
	t.h3Broken.Store(key.Addr, time.Now())
	t.altSvc.Forget(key.Addr)
}

// attemptH3 runs wire attempt n over HTTP/3. It returns the response, or
// the final error, or the next attempt's start when fsm decided to
// resend; or errFallbackTCP (attempt 1 under plan.PreferHTTP3 or
// plan.DiscoverHTTP3 only, nothing sent, nothing reported) when no
// QUIC connection could be had.
//
// A request with an untouched one-shot body starts on a new connection:
// quic-go cannot hand such a request back unsent the way net/http can,
// and a stale pooled connection would then fail it with no resend.
func (tr *try) attemptH3(n int, start resend) (*http.Response, *resend, error) {
	facts, body := start.facts, start.body
	ha := &h3Attempt{}
	a := tr.newAttempt(&ha.attempt, body, tr.streamRecorder(&ha.rec, &ha.attempt, facts), bodyWatch{mux: true, finish: true}, start.hedge)
	if a.lostAtStart() {
		return a.failed(a.rec.Decision(), errHedgeLost)
	}
	a.displaced = start.displaced
	after := start.after
	if n == 1 && facts.Body == fsm.BodyOneShotUntouched {
		after = tr.call.t.h3pool.Mark() // only a connection opened from now on
	}
	same, _ := start.same.(*h3Conn)
	var hc *h3Conn
	var reused bool
	var err error
	fallback := n == 1 && tr.leg.Next == plan.FallbackNoConn
	race := fallback && tr.leg.Race && tr.call.t.cfg.HTTP3HeadStart > 0
	if !race {
		// A pooled connection with room is taken at once (the pool's
		// own first step, muxPool.acquire); only an attempt that may
		// wait or dial needs its own context and the acquisition
		// deadline's timer.
		hc, reused, _ = tr.call.t.h3pool.Take(tr.key, after, same, start.displaced)
	}
	switch {
	case hc != nil:
	case race:
		hc, reused, err = tr.call.t.raceH3(a.acquireContext(), tr.key, after)
	default:
		hc, reused, err = tr.call.t.acquireH3(a.acquireContext(), tr.key, after, same, redialFor(start), tr.offersEarly(a, facts))
		if err != nil && fallback && !errors.Is(err, context.Canceled) {
			tr.call.t.markH3Broken(tr.key)
		}
	}
	if err != nil {
		if fallback && tr.call.context().Err() == nil {
			// Nothing was sent over QUIC: the call starts afresh over TCP
			// (call.run), as one more leg of its plan.
			a.rec.Stop()
			a.cancel(nil)
			return nil, nil, errFallbackTCP
		}
		return a.acquireFailed(err)
	}
	a.reused = reused
	if reused {
		hc.obs.reused(hc.state.Key.Addr)
	}
	// A request goes as early data only on a connection still in its
	// handshake, only as the call's first attempt, only when fsm allows
	// it (RS32), and only on a stream of its own: quic-go's ClientConn
	// holds any other request until the handshake completes.
	own := a.body == nil && h3.OwnStream(tr.call.req)
	early := hc.early && !hc.handshook() && tr.offersEarly(a, facts)
	a.rec.Feed(fsm.Event{Kind: fsm.EventConnAcquired, Reused: reused, Proto: fsm.ProtoH3, Early: early})

	s := &ha.stream
	s.early = early
	ha.att.Init(hc.watch)
	s.t, s.hc, s.att, s.a, s.resend = tr.call.t, hc, &ha.att, a, start.displaced
	s.att.SetInformationalLimit(tr.call.t.informationalLimit())
	a.wire = s
	a.gotConn()
	if early {
		go ha.settled(hc)
	} else if hc.early {
		// Any other request waits for the handshake; nothing of it has
		// been written if the connection ends first.
		if err := hc.awaitHandshake(a.stackContext()); err != nil {
			return a.roundTripped(nil, err)
		}
	}
	// A request without a body goes on a stream the attempt opens itself
	// (h3.Attempt.RoundTrip): its stream ID is known at once, and quic-go
	// calls no hook per header field.
	out := a.outgoing(body, func(ctx context.Context) context.Context {
		if own {
			return withTrace(ctx, s.att.StreamTrace(&ha.rec, s))
		}
		return withTrace(ctx, s.att.Trace(&ha.rec, s))
	})
	if isExtendedConnect(out) {
		// quic-go takes the extended CONNECT's :protocol from Proto, set
		// on a copy: out may be the caller's request (see outgoing).
		if out == tr.call.req {
			out = out.WithContext(out.Context())
		}
		out.Proto = out.Header.Get(":protocol")
		out.Header = out.Header.Clone()
		delete(out.Header, ":protocol")
	}
	var resp *http.Response
	if own {
		resp, err = s.att.RoundTrip(hc.cc, hc.tls.Load(), out)
		if resp != nil && early {
			resp.TLS = hc.handshakeState() // the one from before the handshake's end is incomplete
		}
	} else {
		resp, err = hc.cc.RoundTrip(out)
	}
	return a.roundTripped(resp, err)
}

// offersEarly reports whether attempt a with facts may go as early data:
// EarlyData is on, it is the call's first wire attempt (its number, not
// its place in the try: a configured retry, RS22's 425 retry included,
// starts a try of its own and never goes early, RFC 8470 §5.2), fsm
// allows it (RS32), and it goes on a stream of its own (quic-go's
// ClientConn holds every other request until the handshake completes).
// Only such an attempt dials with DialEarly.
func (tr *try) offersEarly(a *attempt, facts fsm.Request) bool {
	return tr.call.t.cfg.EarlyData && a.number == 1 && facts.EarlySafe() &&
		(tr.call.req.Body == nil || tr.call.req.Body == http.NoBody) && h3.OwnStream(tr.call.req)
}

// h3Attempt is an HTTP/3 attempt with its recorder and stream, in one
// allocation.
type h3Attempt struct {
	attempt
	rec    streamRec
	stream h3Stream
	att    h3.Attempt
}

// h3Stream is an HTTP/3 attempt's stream: its attemptWire.
type h3Stream struct {
	t   *Transport
	hc  *h3Conn
	att *h3.Attempt
	a   *attempt
	// resend: the pool counted the attempt as a displaced request's
	// resend, on the wire or not until its end (pool.Mux.Sent): quic-go
	// says nothing sooner of every request.
	resend bool

	early bool // the request went as early data
	alone bool // the server rejected the request alone (rejectedAlone)

	mu         sync.Mutex
	ended      bool // the attempt's response ended
	uploadDone bool // quic-go finished with the request body
}

// settled feeds the end of an early attempt's handshake: the server
// accepted the early data (RS33's counterpart). A rejection is fed by
// fail, from the request's own error. It returns when the handshake or
// the connection ends.
func (ha *h3Attempt) settled(hc *h3Conn) {
	select {
	case <-hc.qc.HandshakeComplete():
		if hc.qc.ConnectionState().Used0RTT {
			ha.rec.Feed(fsm.Event{Kind: fsm.EventEarlyAccepted})
		}
	case <-hc.qc.Context().Done():
	}
}

func (s *h3Stream) fail(a *attempt, err error) fsm.Decision {
	if s.early && errors.Is(err, quic.Err0RTTRejected) {
		// quic-go's own signal that the server discarded the early data
		// (RS33): the connection takes no more requests.
		s.hc.rejected.Store(true)
		return a.rec.Feed(fsm.Event{Kind: fsm.EventEarlyRejected})
	}
	return a.rec.Feed(a.failureEvent(s.att.Failure(a.stackContext(), err), err))
}

func (s *h3Stream) delivered(*http.Response) bool { return false }

// bodyDoneOnError reports true: the failed request's body is closed
// under quic-go's Read, as x/net closes one, so that quic-go's goroutine
// and the caller's producer are let go.
func (s *h3Stream) bodyDoneOnError() bool { return true }

func (s *h3Stream) informational() error { return s.att.InformationalError() }

// complete feeds the response's end only: quic-go reports the header
// fields written on the caller's goroutine, before RoundTrip returns, and
// the end of the body when it happens, which may be after the response
// (RFC 9114 §4.1).
func (s *h3Stream) complete(a *attempt) fsm.Decision {
	return a.rec.Feed(fsm.Event{Kind: fsm.EventResponseComplete})
}

func (s *h3Stream) end(_ fsm.Decision, clean bool) {
	s.att.Done()
	if s.resend {
		s.t.h3pool.Sent(s.hc)
	}
	s.t.h3pool.Done(s.hc, clean)
}

func (s *h3Stream) retire() {
	s.hc.obs.retired.Store(true)
	s.t.h3pool.Retire(s.hc)
}

// learnGoAway reads the connection's GOAWAY, if one came: HTTP/3 request
// streams are 0, 4, 8, ... and its ID is the first one the server does
// not process (RFC 9114 §5.2).
func (s *h3Stream) learnGoAway() {
	if id, ok := s.hc.watch.GoAway(); ok {
		s.t.h3pool.Learn(s.hc, int(min(id/4, 1<<30)), time.Now())
	}
}

// resendLost teaches the route to spread its resends only when the
// connection is really gone (closed, or a GOAWAY arrived): h3Conn.Gone
// answers true for any connection, and a resend that failed on a live
// one (a 1xx over its bound, a timeout) says nothing of the route.
func (s *h3Stream) resendLost() {
	_, goAway := s.hc.watch.GoAway()
	if s.hc.qc.Context().Err() == nil && !goAway {
		return
	}
	s.t.h3pool.ResendLost(s.hc, time.Now())
}

// resendFrom returns, after a request rejected alone (rejectedAlone),
// the rejection's mark: the resend takes any other pooled connection
// that may take a request, or one dialed after the rejection, never
// this one (pool.Mux.RejectMark, choice 22).
func (s *h3Stream) resendFrom(connFailed bool) (uint64, any) {
	switch {
	case !connFailed:
		return s.t.h3pool.Mark(), s.hc
	case s.alone:
		return s.t.h3pool.RejectMark(s.hc), s.hc
	}
	return s.t.h3pool.FailMark(s.hc), s.hc
}

// rejectedAlone reports H3_REQUEST_REJECTED (RS15) on a QUIC connection
// that is open and received no GOAWAY, and remembers it for resendFrom:
// the server rejected one request on one connection, not the
// connection. The connection stays pooled, and the other requests keep
// it; they meet any GOAWAY first. The resend avoids it, since a
// draining server's GOAWAY may trail the rejection on the control
// stream, but may take any other (choice 22).
func (s *h3Stream) rejectedAlone(rule fsm.Rule) bool {
	if rule != fsm.RuleEvidenceRequestRejected || s.hc.qc.Context().Err() != nil {
		return false
	}
	_, goAway := s.hc.watch.GoAway()
	s.alone = !goAway
	return s.alone
}

// streamReset reports whether the server reset the request stream (a
// remote *quic.StreamError) while the QUIC connection stays open.
func (s *h3Stream) streamReset(err error) bool {
	se, ok := errors.AsType[*quic.StreamError](err)
	return ok && se.Remote && s.hc.qc.Context().Err() == nil
}

// uploading marks the response ended and reports whether quic-go is still
// sending the request body.
func (s *h3Stream) uploading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	return !s.uploadDone
}

// Uploaded is quic-go's end of the upload (h3.Uploader: its WroteRequest
// hook, with the error that ended it, or nil): the stall watch stops,
// and when the response already ended, the attempt's context is
// released.
func (s *h3Stream) Uploaded(error) {
	if s.a.body != nil {
		s.a.body.uploaded()
	}
	s.mu.Lock()
	s.uploadDone = true
	ended := s.ended
	s.mu.Unlock()
	if ended {
		s.a.cancel(nil)
	}
}

// acquireH3 returns a connection with room for one more request: a
// pooled one that is open, got no GOAWAY and joined the pool after mark
// after (or is same), else a new one (muxPool.acquire).
func (t *Transport) acquireH3(ctx context.Context, key pool.Key, after uint64, same *h3Conn, redial pool.Redialing, early bool) (*h3Conn, bool, error) {
	dial := func() (*h3Conn, error) { return t.dialH3(ctx, key, early) }
	return t.h3pool.Acquire(ctx, key, after, same, nil, dial, redial)
}

// h3Dial is a QUIC connection being established ahead of the calls
// that want it (raceH3).
type h3Dial struct {
	done chan struct{} // closed when the dial ended; err is then set
	err  error
	late atomic.Bool // a call's head start passed while it dialed
}

// raceH3 gets attempt 1 of a call under plan.PreferHTTP3 or
// plan.DiscoverHTTP3 a connection: a pooled one (one that joined the
// pool after mark after, for an untouched one-shot body), or one a
// background dial establishes within HTTP3HeadStart. It returns
// errFallbackTCP when the head start passed, the dial failed, or a dial
// that already outlived a head start is still running: the call then
// goes over TCP, nothing of it sent, while the dial goes on for later
// calls.
func (t *Transport) raceH3(ctx context.Context, key pool.Key, after uint64) (*h3Conn, bool, error) {
	for range 2 { // the dial's connection may be taken by another call first
		if hc, reused, _ := t.h3pool.Take(key, after, nil, false); hc != nil {
			return hc, reused, nil
		}
		d := t.startH3Dial(key)
		if d == nil || d.late.Load() {
			return nil, false, errFallbackTCP
		}
		head := time.NewTimer(t.headStart())
		select {
		case <-d.done:
			head.Stop()
			if d.err != nil {
				return nil, false, errFallbackTCP
			}
		case <-head.C:
			d.late.Store(true)
			return nil, false, errFallbackTCP
		case <-ctx.Done():
			head.Stop()
			return nil, false, context.Cause(ctx)
		}
	}
	return nil, false, errFallbackTCP
}

// headStart returns how long a call waits for a new QUIC connection:
// HTTP3HeadStart, but at most half the acquisition deadline, so that the
// TCP fallback always has time.
func (t *Transport) headStart() time.Duration {
	if t.cfg.AcquireTimeout > 0 {
		return min(t.cfg.HTTP3HeadStart, t.cfg.AcquireTimeout/2)
	}
	return t.cfg.HTTP3HeadStart
}

// startH3Dial returns key's background QUIC dial, starting one when none
// runs, or nil when the route is at MaxConnsPerHost. The dial runs under
// Config.BackgroundDialTimeout; its connection
// joins the pool idle, unless CloseIdleConnections ran meanwhile (it is
// closed then), and its failure marks the route broken.
func (t *Transport) startH3Dial(key pool.Key) *h3Dial {
	t.h3mu.Lock()
	defer t.h3mu.Unlock()
	if d := t.h3dials[key]; d != nil {
		return d
	}
	if !t.limit.TryOpen(key) {
		return nil
	}
	d := &h3Dial{done: make(chan struct{})}
	if t.h3dials == nil {
		t.h3dials = map[pool.Key]*h3Dial{}
	}
	t.h3dials[key] = d
	budget := t.cfg.BackgroundDialTimeout
	closes := t.closes.Load()
	tick := t.h3pool.Tick()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		hc, err := t.dialH3(ctx, key, false)
		switch {
		case err != nil:
			t.limit.Closed(key)
			t.markH3Broken(key)
		case t.closes.Load() != closes:
			// CloseIdleConnections ran meanwhile: the caller is done
			// with what the Transport started, as net/http closes a
			// connection that becomes idle after that call.
			hc.Close(func() { t.limit.Closed(key) })
		default:
			t.h3pool.AddIdle(hc, tick)
		}
		d.err = err
		t.h3mu.Lock()
		delete(t.h3dials, key)
		t.h3mu.Unlock()
		close(d.done)
	}()
	return d
}

// dialH3 makes a new HTTP/3 connection for key (an https origin on a
// direct route: the plan allows no other): it resolves the host and
// dials QUIC, from the Transport's shared UDP socket of the address's
// family, with TLS offering ALPN "h3" under the attempt's acquisition
// deadline, observed by an adapters/h3 Watch; quic-go's ClientConn runs
// over that.
func (t *Transport) dialH3(ctx context.Context, key pool.Key, early bool) (*h3Conn, error) {
	addr, err := t.h3Addr(key)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip, err := resolveOne(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("replaysafe: resolving %s: %w", host, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("replaysafe: port of %s: %w", addr, err)
	}
	raddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(p)))
	network := "udp4"
	if ip.Is6() {
		network = "udp6"
	}
	sh, err := t.udp.acquire(network)
	if err != nil {
		return nil, fmt.Errorf("replaysafe: UDP socket for %s: %w", addr, err)
	}
	w := h3.NewWatch()
	tlsConf := t.dial.TLSConfig(key.Host, []string{http3.NextProtoH3})
	var qc *quic.Conn
	if t.sessions != nil && tlsConf.ClientSessionCache == nil {
		tlsConf.ClientSessionCache = t.sessions.route(key) // the route's own tickets
	}
	if early {
		// For an attempt that may go as early data: quic-go returns the
		// connection as soon as a resumed session lets it carry 0-RTT,
		// before the handshake completes.
		qc, err = sh.tr.DialEarly(ctx, raddr, tlsConf, t.quicConfig(w))
	} else {
		qc, err = sh.tr.Dial(ctx, raddr, tlsConf, t.quicConfig(w))
	}
	if err != nil {
		sh.release()
		return nil, fmt.Errorf("replaysafe: QUIC handshake with %s: %w", addr, err)
	}
	// The connection's hold on the socket goes when quic-go's http3 layer
	// is done with it, whichever side closed it (Watch.OnEnd): no
	// watcher of the connection's context of our own.
	w.OnEnd(sh.release)
	hc := &h3Conn{qc: qc, cc: t.h3factory.NewClientConn(qc), watch: w, state: pool.MuxState{Key: key}}
	state := qc.ConnectionState().TLS
	hc.tls.Store(&state)
	if !hc.handshook() {
		hc.early = true
		go hc.settle()
	}
	t.opened(&hc.obs, key, fsm.ProtoH3)
	return hc, nil
}

// resolveOne returns the first address of host, or host itself when it
// is an IP literal.
func resolveOne(ctx context.Context, host string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("no address for %s", host)
	}
	return ips[0].Unmap(), nil
}

// udpSockets shares one UDP socket, and the quic.Transport over it, per
// address family among a Transport's QUIC connections, as quic-go's own
// Transport does: QUIC tells its connections apart by connection ID. A
// socket opens with the first connection of its family and closes with
// the last, so an idle Transport holds none.
type udpSockets struct {
	mu    sync.Mutex
	share map[string]*udpShare // "udp4", "udp6"
}

// udpShare is one socket of a udpSockets and the connections it carries.
type udpShare struct {
	u       *udpSockets
	network string
	tr      *quic.Transport
	conn    *net.UDPConn
	refs    int // guarded by u.mu
}

// acquire returns network's socket, counted as carrying one more
// connection until one call of its release, when that connection is
// over.
func (u *udpSockets) acquire(network string) (*udpShare, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	sh := u.share[network]
	if sh == nil {
		conn, err := net.ListenUDP(network, nil)
		if err != nil {
			return nil, err
		}
		sh = &udpShare{u: u, network: network, tr: &quic.Transport{Conn: conn}, conn: conn}
		if u.share == nil {
			u.share = map[string]*udpShare{}
		}
		u.share[network] = sh
	}
	sh.refs++
	return sh, nil
}

// release counts one connection less on the socket, and closes it after
// the last.
func (sh *udpShare) release() {
	u := sh.u
	u.mu.Lock()
	sh.refs--
	last := sh.refs == 0
	if last {
		delete(u.share, sh.network)
	}
	u.mu.Unlock()
	if last {
		sh.tr.Close()
		sh.conn.Close()
	}
}

// connLost records the loss in the HTTP/3 pool.
func (s *h3Stream) connLost(key pool.Key) { s.t.h3pool.Lost(key) }
