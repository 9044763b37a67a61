package dial

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/internal/pool"
	"github.com/replaysafe/replaysafe/transports/proxy"
)

// budgetClock reads the Transport's clock, the one fsm deadlines are on,
// as route instants, so the acquisition budget and the machine's acquire
// phase are measured alike.
type budgetClock struct{ c recorder.Clock }

func (b budgetClock) Now() route.Instant { return route.Instant(b.c.Now()) }

// dialFunc adapts Config.DialContext to proxy.ContextDialer.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (f dialFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

// connectProxied establishes a connection through snap's proxy chain:
// the first hop through Config.DialContext, TLS with every https proxy
// (an https first hop is offered h2: its tunnels are then HTTP/2 CONNECT
// streams of a shared connection, d.h2Proxies), CONNECT or SOCKS5 at
// every hop, then TLS with an https origin inside
// the tunnel, offering o.ALPN. One budget covers all of it, waiting for
// capacity included: AcquireTimeout from o.Start, the instant the
// attempt's machine started its acquire phase, on the machine's clock, so
// both measure the same deadline. Every attempt (a resend included) has
// its own.
func (d *Dialer) connectProxied(ctx context.Context, key pool.Key, snap *Route, o Opts) (Conn, error) {
	clock, b := d.budget(o)
	pd := d.proxyDialer(ctx, clock)
	r := snap.route
	hops := make([]proxy.Hop, r.NumHops())
	for i := range hops {
		hops[i] = proxy.Hop{Hop: r.Hop(i), HopConfig: snap.configs[i]}
	}
	tunnel, err := proxy.DialChain(ctx, pd, hops, r.Addr(), b)
	if ce, ok := errors.AsType[*proxy.ChainCredentialsError](err); ok {
		return Conn{}, &proxy.ResolveError{Hop: ce.Hop, Err: err}
	}
	if err != nil {
		return Conn{}, acquireErr(ctx, b, clock, err)
	}
	if key.Scheme != "https" && len(hops) > 0 {
		// Bytes the last proxy sent with its CONNECT 2xx came before the
		// request was written: no response to it, so the attempt fails
		// (an acquisition failure: nothing of the request left).
		last := len(hops) - 1
		if err := proxy.CheckPlainTunnel(tunnel, last+1, hops[last].Addr()); err != nil {
			tunnel.Close()
			return Conn{}, err
		}
	}
	if key.Scheme != "https" {
		return Conn{Conn: tunnel}, nil
	}
	under, wire := o.underTLS(tunnel)
	tc, err := proxy.HandshakeOrigin(ctx, pd, under, d.TLSConfig(key.Host, o.ALPN), b)
	if err != nil {
		return Conn{}, acquireErr(ctx, b, clock, err)
	}
	cs := tc.ConnectionState()
	return Conn{Conn: tc, Wire: wire, TLS: &cs}, nil
}

// proxyDialer returns the proxy.Dialer of one acquisition under ctx.
func (d *Dialer) proxyDialer(ctx context.Context, clock budgetClock) *proxy.Dialer {
	pd := &proxy.Dialer{TCP: dialFunc(d.cfg.DialContext), Clock: clock, H2: &d.h2Proxies,
		AllowCleartextChainCredentials: d.cfg.AllowCleartextChainCredentials, TLSHandshakeTimeout: d.cfg.TLSHandshakeTimeout}
	if f := d.cfg.OnConnectResponse; f != nil {
		pd.OnConnectResponse = func(h proxy.Hop, req proxy.ConnectRequest, resp *proxy.Response) error { return f(ctx, h, req, resp) }
	}
	return pd
}

// budget returns the acquisition budget of an attempt that started its
// acquire phase at o.Start (now, when zero), on the machine's clock.
func (d *Dialer) budget(o Opts) (budgetClock, route.Budget) {
	clock := budgetClock{d.cfg.Clock}
	start := route.Instant(o.Start)
	if start == 0 {
		start = clock.Now()
	}
	return clock, route.Start(start, d.cfg.AcquireTimeout)
}

// connectForward connects to a forward route's proxy (proxy.DialProxy):
// TCP through Config.DialContext, TLS with an https proxy, under the
// attempt's acquisition budget as connectProxied's steps are. The
// requests then go to the proxy in absolute form.
func (d *Dialer) connectForward(ctx context.Context, snap *Route, o Opts) (Conn, error) {
	clock, b := d.budget(o)
	pd := d.proxyDialer(ctx, clock)
	conn, err := proxy.DialProxy(ctx, pd, proxy.Hop{Hop: snap.route.Hop(0), HopConfig: snap.configs[0]}, b)
	if err != nil {
		return Conn{}, acquireErr(ctx, b, clock, err)
	}
	return Conn{Conn: conn}, nil
}

// machineGrace bounds the wait for the machine's timer after the budget
// saw the same deadline pass first: both are one instant on one clock,
// so the wait is the timer's latency.
const machineGrace = 250 * time.Millisecond

// acquireErr makes a failed establishment's error name the step that ran
// out of time, when time ran out.
//
// The machine's acquire phase and the budget end at the same instant.
// The machine's timer usually fires first and cancels ctx, and the step
// then fails with a *proxy.StepError whose step and hop become a
// *route.DeadlineError. When a step's own deadline from the budget
// fires first, the machine's timer is due: waiting for it lets the
// machine decide the attempt as an acquire-phase timeout (RS06) either
// way, rather than as an acquisition failure on a race.
func acquireErr(ctx context.Context, b route.Budget, clock budgetClock, err error) error {
	var de *route.DeadlineError
	if errors.As(err, &de) {
		t := time.NewTimer(machineGrace)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	te := acquireTimeout(ctx)
	if te == nil {
		return err // no deadline passed (or the machine never saw it)
	}
	if de == nil {
		var se *proxy.StepError
		if !errors.As(err, &se) {
			return err
		}
		de = b.Exceeded(clock.Now(), se.Step, se.Hop, nil)
	}
	named := *te
	named.Step = de
	return &named
}

// acquireTimeout returns the acquire-phase TimeoutError ctx was canceled
// with, or nil.
func acquireTimeout(ctx context.Context) *recorder.TimeoutError {
	var te *recorder.TimeoutError
	if errors.As(context.Cause(ctx), &te) && te.Phase == fsm.PhaseAcquire {
		return te
	}
	return nil
}
