// Package driver is what replaysafe's Transport runs on: one call driver

// for every protocol. A call resolves its route and dispatch plan, runs
// its wire attempts on its protocol's connections (HTTP/1.1 over
// net/http's ClientConn, HTTP/2, HTTP/3 over quic-go's ClientConn), feeds
// what each attempt's adapter observed to an fsm.Machine, and acts on the
// decisions of the attempt's machine and of the call machine (fsm.Call):
// deliver, fail naming the rule, resend at once, or retry after a wait.
//
// The face (package replaysafe) validates the options, turns a Failure
// into its *Error and calls the caller's Observer; nothing here is
// promised to anyone else.
package driver

import (
	"context"
	"crypto/tls"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/transports/h2"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/plan"
	"github.com/replaysafe/replaysafe/internal/altsvc"
	"github.com/replaysafe/replaysafe/internal/dial"
	"github.com/replaysafe/replaysafe/internal/pool"
)

// Config is the Transport's options as the driver uses them, defaults
// filled in by the face (replaysafe.Options documents each field).
type Config struct {
	Dial dial.Config

	TLSClientConfig     *tls.Config
	Protocol            plan.Policy
	MaxIdleConnsPerHost int
	MaxIdleConns        int // every pool together; <= 0: no bound
	MaxConnsPerHost     int
	DisableKeepAlives   bool
	// ExpectContinueTimeout is how long an HTTP/1.1 request expecting
	// 100-continue waits before its body; 0 sends it at once.
	ExpectContinueTimeout  time.Duration
	IdleConnTimeout        time.Duration
	AcquireTimeout         time.Duration
	WriteTimeout           time.Duration
	ResponseHeaderTimeout  time.Duration
	BodyReadTimeout        time.Duration
	UploadStallTimeout     time.Duration
	DisableResend          bool
	CallerRetries          bool
	DisableCompression     bool
	MaxResponseHeaderBytes int64
	QUICConfig             *quic.Config
	HTTP3HeadStart         time.Duration
	// EarlyData lets the first wire attempt of a call that fsm allows in
	// early data (fsm.Request.EarlySafe, RS32) go as 0-RTT on a new
	// HTTP/3 connection that resumes a session of its route; QUIC
	// connections are then dialed with quic-go's DialEarly and a bounded
	// session-ticket cache.
	EarlyData bool
	// EarlyDataKeyed lets a request with an idempotency key go as early
	// data too (fsm.Request.EarlyKeyed).
	EarlyDataKeyed bool
	// SessionTickets bounds the session-ticket cache under EarlyData;
	// zero or less means DefaultSessionTickets.
	SessionTickets int
	// H3RetryAfter is how long a route whose QUIC connection failed
	// keeps to TCP under plan.PreferHTTP3 and plan.DiscoverHTTP3.
	H3RetryAfter time.Duration
	// BackgroundDialTimeout bounds a QUIC dial that goes on after its
	// call's head start passed.
	BackgroundDialTimeout time.Duration
	// Redial spaces the dials of a route that refuses while displaced
	// requests wait for it (spec/choices.md, choice 23); the zero value
	// means pool.DefaultRedialBase and pool.DefaultRedialMax.
	Redial pool.Redial

	// OnAttempt, if set, is told of every finished wire attempt.
	OnAttempt func(Report)
	// OnAttemptStart, if set, is told of every wire attempt as it begins.
	OnAttemptStart func(AttemptStart)
	// OnConn, if set, is told of every connection dialed, reused and
	// closed (observe.go).
	OnConn func(ConnEvent)
	// H2 is the base of every HTTP/2 connection's configuration; the
	// fields this Config also sets (compression, the header list size,
	// the 1xx bound) are taken from here.
	H2 h2.Config
	// FailureError, if set, turns the *Failure of a response body that
	// failed mid-read into the error its Read returns (the face's *Error);
	// unset, Read returns the *Failure.
	FailureError func(*Failure) error
}

// Transport carries out calls: it owns the pools, the connection
// factories and what was learned about destinations. It is safe for
// concurrent use.
type Transport struct {
	cfg     Config
	limits  fsm.Limits
	clock   recorder.Clock
	dial    *dial.Dialer
	factory *http.Transport
	limit   *pool.Limit // connections per route, every protocol (MaxConnsPerHost)
	h1pool  *pool.Idle[*persistConn]
	h1down  *pool.Down // HTTP/1.1 routes found not answering (pool.DialWaiting)

	// HTTP/2: the connections' configuration, the multiplexed pool, and
	// the routes ALPN answered with HTTP/1.1 under negotiation.
	h2cfg  h2.Config
	h2pool *pool.Mux[*h2Conn]
	h1Only pool.Memo[pool.Key, struct{}]

	// HTTP/3: quic-go's connection factory, the pool, and under
	// plan.PreferHTTP3 the destinations (host:port) whose QUIC
	// connection failed, with the time (h3.go).
	h3factory *http3.Transport
	h3pool    *pool.Mux[*h3Conn]
	h3Broken  pool.Memo[string, time.Time] // destination → when its QUIC handshake failed
	h3mu      sync.Mutex
	h3dials   map[pool.Key]*h3Dial // background QUIC dials (raceH3)
	altSvc    *altsvc.Cache        // plan.DiscoverHTTP3: origin → HTTP/3 port
	udp       udpSockets           // the QUIC connections' shared UDP sockets
	sessions  *sessionCache        // Config.EarlyData: the routes' TLS session tickets

	// closes counts CloseIdle calls: a background QUIC dial that ends
	// after one closes its connection instead of keeping it.
	closes atomic.Uint64

	budgets retryBudgets   // Retry.Budget, per route
	rand    func() float64 // a retry's jitter; nil: math/rand/v2 (tests set it)
}

// New returns a Transport configured by cfg.
func New(cfg Config) *Transport {
	limit := pool.NewLimit(cfg.MaxConnsPerHost)
	idle := pool.NewIdleCap(cfg.MaxIdleConns)
	if cfg.DisableKeepAlives {
		cfg.MaxIdleConnsPerHost = -1 // every connection closes after its exchange
	}
	clock := recorder.NewClock()
	cfg.Dial.Clock = clock
	cfg.Dial.TLSClientConfig = cfg.TLSClientConfig
	cfg.Dial.AcquireTimeout = cfg.AcquireTimeout
	t := &Transport{
		cfg:     cfg,
		clock:   clock,
		dial:    dial.New(cfg.Dial),
		factory: newFactory(cfg),
		limit:   limit,
		h1pool:  pool.NewIdle[*persistConn](cfg.MaxIdleConnsPerHost, cfg.IdleConnTimeout, limit, idle),
		h1down:  pool.NewDown(cfg.Redial),

		h2cfg:  h2Config(cfg),
		h2pool: pool.NewMux[*h2Conn](cfg.MaxIdleConnsPerHost, cfg.IdleConnTimeout, limit, idle),

		h3factory: newH3Factory(cfg),
		altSvc:    altsvc.NewCache(),
		h3pool:    pool.NewMux[*h3Conn](cfg.MaxIdleConnsPerHost, cfg.IdleConnTimeout, limit, idle),
	}
	if cfg.EarlyData {
		t.sessions = newSessionCache(cfg.SessionTickets)
	}
	t.h2pool.SetRedial(cfg.Redial)
	t.h3pool.SetRedial(cfg.Redial)
	t.h3Broken.Stale = func(at time.Time) bool { return time.Since(at) >= cfg.H3RetryAfter }
	if cfg.AcquireTimeout > 0 {
		t.limits.Acquire = cfg.AcquireTimeout
	}
	t.limits.Write = max(cfg.WriteTimeout, 0)
	t.limits.Header = max(cfg.ResponseHeaderTimeout, 0)
	return t
}

// CloseIdle closes the connections sitting idle in the pools.
// Connections in use close when their exchange ends.
func (t *Transport) CloseIdle() {
	t.closes.Add(1)
	t.h1pool.CloseIdle()
	t.h2pool.CloseIdle()
	t.h3pool.CloseIdle()
}

// IdleConns returns the number of idle pooled connections: HTTP/1.1
// connections in the pool, and pooled HTTP/2 and HTTP/3 connections
// carrying no request.
func (t *Transport) IdleConns() int {
	return t.h1pool.IdleCount() + t.h2pool.IdleCount() + t.h3pool.IdleCount()
}

// Failure is how a call that was started ends when it fails: the rule
// that decided, the wire attempts made, the call machine's decisions,
// and the cause. The face turns it into its *Error.
type Failure struct {
	Rule     fsm.Rule
	Attempts int
	History  []fsm.CallDecision
	Err      error
}

func (f *Failure) Error() string { return f.Err.Error() }

func (f *Failure) Unwrap() error { return f.Err }

// Report describes one finished wire attempt (the face's AttemptReport,
// field for field).
type Report struct {
	Request  *http.Request
	Number   int
	Facts    fsm.Request
	Reused   bool
	Status   int
	Decision fsm.Decision
	Call     fsm.CallDecision
	Events   []fsm.Event
	Err      error
	Trace    string
	Hedge    bool
}

// sleep waits d or until ctx ends, and returns ctx's cause then.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// poolMark is the clock of the pool of protocol p now (pool.Mux.Mark): a
// copy started from it takes only a connection that joins the pool
// later, so never one another copy uses. HTTP/1.1 has no clock: its
// copies never share a connection anyway.
func (t *Transport) poolMark(p fsm.Proto) uint64 {
	switch p {
	case fsm.ProtoH2:
		return t.h2pool.Mark()
	case fsm.ProtoH3:
		return t.h3pool.Mark()
	}
	return 0
}
