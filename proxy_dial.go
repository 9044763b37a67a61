package replaysafe

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/transports/proxy"
	"github.com/replaysafe/replaysafe/adapters/recorder"
)

// budgetClock reads the Transport's clock, the one fsm deadlines are on,
// as route instants, so the acquisition budget and the machine's acquire
// phase are measured alike.
type budgetClock struct{ c recorder.Clock }

func (b budgetClock) Now() route.Instant { return route.Instant(b.c.Now()) }

// dialFunc adapts Options.DialContext to proxy.ContextDialer.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (f dialFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

// connectProxied establishes a connection through snap's proxy chain:
// the first hop through Options.DialContext, TLS with every https proxy,
// CONNECT or SOCKS5 at every hop, then TLS with an https origin inside
// the tunnel, offering o.alpn. One budget covers all of it, waiting for
// capacity included: AcquireTimeout from o.start, the instant the
// attempt's machine started its acquire phase, on the machine's clock, so
// both measure the same deadline. Every attempt (a resend included) has
// its own.
func (t *Transport) connectProxied(ctx context.Context, key connKey, snap *routeSnapshot, o connectOpts) (established, error) {
	clock := budgetClock{t.clock}
	start := route.Instant(o.start)
	if start == 0 {
		start = clock.Now()
	}
	b := route.Start(start, t.opt.AcquireTimeout)
	d := &proxy.Dialer{TCP: dialFunc(t.opt.DialContext), Clock: clock, AllowCleartextChainCredentials: t.opt.AllowCleartextChainCredentials}
	r := snap.route
	hops := make([]proxy.Hop, r.NumHops())
	for i := range hops {
		hops[i] = proxy.Hop{Hop: r.Hop(i), HopConfig: snap.configs[i]}
	}
	tunnel, err := proxy.DialChain(ctx, d, hops, r.Addr(), b)
	if ce, ok := errors.AsType[*proxy.ChainCredentialsError](err); ok {
		return established{}, &ProxyError{Hop: ce.Hop, Err: err}
	}
	if err != nil {
		return established{}, acquireErr(ctx, b, clock, err)
	}
	if key.scheme != "https" && len(hops) > 0 {
		// Bytes the last proxy sent with its CONNECT 2xx came before the
		// request was written: no response to it, so the attempt fails
		// (an acquisition failure: nothing of the request left).
		last := len(hops) - 1
		if err := proxy.CheckPlainTunnel(tunnel, last+1, hops[last].Addr()); err != nil {
			tunnel.Close()
			return established{}, err
		}
	}
	if key.scheme != "https" {
		return established{conn: tunnel}, nil
	}
	under, wire := o.underTLS(tunnel)
	tc, err := proxy.HandshakeOrigin(ctx, d, under, t.tlsConfig(key.host, o.alpn), b)
	if err != nil {
		return established{}, acquireErr(ctx, b, clock, err)
	}
	cs := tc.ConnectionState()
	return established{conn: tc, wire: wire, tls: &cs}, nil
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
	return &AcquireDeadlineError{TimeoutError: te, Step: de}
}

// acquireTimeout returns the acquire-phase TimeoutError ctx was canceled
// with, or nil.
func acquireTimeout(ctx context.Context) *TimeoutError {
	var te *TimeoutError
	if errors.As(context.Cause(ctx), &te) && te.Phase == fsm.PhaseAcquire {
		return te
	}
	return nil
}

// AcquireDeadlineError is the cause of a call whose connection
// acquisition ran out of time during a named step (a proxied route): it
// is both the acquire-phase *TimeoutError and the *route.DeadlineError
// naming the step and the proxy hop, so errors.As finds either.
type AcquireDeadlineError struct {
	*TimeoutError
	Step *route.DeadlineError
}

// Error names the step and hop that ran out of time.
func (e *AcquireDeadlineError) Error() string { return e.Step.Error() }

// Unwrap returns the TimeoutError and the DeadlineError.
func (e *AcquireDeadlineError) Unwrap() []error { return []error{e.TimeoutError, e.Step} }

// Is reports context.DeadlineExceeded, as TimeoutError does.
func (e *AcquireDeadlineError) Is(target error) bool { return target == context.DeadlineExceeded }
