package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/connectproxy"
)

// TargetPath is the path of the request whose copies a case counts.
const TargetPath = "/target"

// Env is what a scenario's steps drive: one scripted server, one client,
// and, over HTTP/1.1, the connections the client dialed. A new Env is
// made for every run.
type Env struct {
	// Network is the case's network and close mode.
	Network Network
	// Server is the scripted origin.
	Server replaysafetest.Scripted
	// Client is the client under test.
	Client http.RoundTripper
	// Dialer holds the client's connections (HTTP/1.1 only; nil
	// otherwise).
	Dialer *Dialer
	// Signal is closed by IdleCloseSeen and IdleCloseInFlight; the
	// idle-close action passes it to replaysafetest.IdleCloseOn.
	Signal chan struct{}
	// Proxy is the CONNECT proxy of a proxy scenario, or nil.
	Proxy *connectproxy.Server

	h1         *replaysafetest.Server // Server, over HTTP/1.1
	early      bool                   // the origin allows early data (server early...)
	zeroRTT    bool                   // the client is quic-go's: the target goes with its 0-RTT method
	closeIdle  func()                 // closes the client's idle connections
	primed     func()                 // called once the prime step is done
	ctx        context.Context
	signalOnce sync.Once
	mu         sync.Mutex    // guards elapsed
	deadline   time.Duration // bounds the target request when set
	elapsed    time.Duration // the slowest target call's duration
}

// CloseMode is the close mode the case's server uses.
func (e *Env) CloseMode() replaysafetest.CloseMode { return e.Network.Close }

// Result is what a scenario's target request ended with.
type Result struct {
	// Status is the final status code, or 0 when the call failed.
	Status int
	// Err is the call's error, or nil.
	Err error
}

// Warm sends GET path, expects 200 and reads the whole body, leaving the
// connection idle in the client's pool.
func (e *Env) Warm(path string) error {
	resp, err := e.Hold(path)
	if err != nil {
		return err
	}
	return finish(resp)
}

// Hold sends GET path and returns the 200 response with its body unread,
// so the connection stays busy.
func (e *Env) Hold(path string) (*http.Response, error) {
	req, err := e.newRequest(e.ctx, http.MethodGet, path, NoBody)
	if err != nil {
		return nil, err
	}
	resp, err := e.Client.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("conformance: %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("conformance: %s: status %d", path, resp.StatusCode)
	}
	return resp, nil
}

// finish reads resp's body to the end and closes it.
func finish(resp *http.Response) error {
	_, err := io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	return err
}

// Prime sends GET /prime on a first connection, whose session ticket a
// later connection resumes, and closes that connection: the next request
// dials anew and may go as early data.
func (e *Env) Prime() error {
	if !e.early {
		return errors.New("conformance: prime needs an early-data origin (server early)")
	}
	if err := e.Warm("/prime"); err != nil {
		return err
	}
	e.closeIdle()
	if e.primed != nil {
		e.primed()
	}
	return nil
}

// Target sends the counted request and reads its whole response.
func (e *Env) Target(method string, body Body, header ...string) Result {
	if e.zeroRTT {
		switch method { // quic-go sends only these in 0-RTT, by the caller's choice
		case http.MethodGet:
			method = http3.MethodGet0RTT
		case http.MethodHead:
			method = http3.MethodHead0RTT
		}
	}
	ctx, cancel := e.targetCtx()
	defer cancel()
	return e.TargetContext(ctx, TargetPath, method, body, header...)
}

// targetCtx returns the run's context, bounded by the peer deadline when
// one applies.
func (e *Env) targetCtx() (context.Context, context.CancelFunc) {
	if e.deadline > 0 {
		return context.WithTimeout(e.ctx, e.deadline)
	}
	return context.WithCancel(e.ctx)
}

// TargetContext sends method to path (TargetPath, or TargetPath with a
// query naming one request of a burst) with ctx, reads the whole
// response, and keeps the slowest call's duration.
func (e *Env) TargetContext(ctx context.Context, path, method string, body Body, header ...string) Result {
	req, err := e.newRequest(ctx, method, path, body, header...)
	if err != nil {
		return Result{Err: err}
	}
	start := time.Now()
	defer func() {
		d := time.Since(start)
		e.mu.Lock()
		e.elapsed = max(e.elapsed, d)
		e.mu.Unlock()
	}()
	resp, err := e.Client.RoundTrip(req)
	if err != nil {
		return Result{Err: err}
	}
	if err := finish(resp); err != nil {
		return Result{Err: err}
	}
	return Result{Status: resp.StatusCode}
}

// closeSignal closes Signal once.
func (e *Env) closeSignal() { e.signalOnce.Do(func() { close(e.Signal) }) }

// IdleCloseSeen has the server close connection 0 (scripted with
// IdleCloseOn) and waits until the client's stack noticed and closed it.
func (e *Env) IdleCloseSeen() error {
	e.closeSignal()
	if err := e.h1.WaitConnClosed(e.ctx, 0); err != nil {
		return err
	}
	return e.Dialer.WaitClosed(e.ctx, 0)
}

// IdleCloseInFlight has the server close connection 0 (scripted with
// IdleCloseOn) while the client cannot learn of it before it writes: the
// close is on its way when the next request goes out. It returns once the
// client's kernel has the close (the read that reports it is held back).
func (e *Env) IdleCloseInFlight() error {
	c := e.Dialer.Conn(0)
	if c == nil {
		return errors.New("conformance: no connection to freeze")
	}
	c.Freeze()
	e.closeSignal()
	if err := e.h1.WaitConnClosed(e.ctx, 0); err != nil {
		return err
	}
	return e.Dialer.WaitHeld(e.ctx, 0)
}

// Expire runs the target request with a context whose deadline passes
// once the server has received it (the server must not answer it), so the
// client times out waiting for the response header section.
func (e *Env) Expire(method string, body Body) Result {
	return e.endAfterReceipt(context.DeadlineExceeded, method, body)
}

// Cancel runs the target request with a context canceled once the server
// has received it (the server must not answer it).
func (e *Env) Cancel(method string, body Body) Result {
	return e.endAfterReceipt(context.Canceled, method, body)
}

func (e *Env) endAfterReceipt(reason error, method string, body Body) Result {
	ctx := newTriggerCtx(e.ctx)
	n := e.h1.Count()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.h1.WaitRequests(e.ctx, n+1) // on failure, end the request anyway
		ctx.end(reason)
	}()
	res := e.TargetContext(ctx, TargetPath, method, body)
	ctx.end(reason)
	<-done
	return res
}

// triggerCtx is a context that ends when told to, with the error it is
// told: a deadline that passes at a point of the exchange chosen by the
// scenario rather than by a clock.
type triggerCtx struct {
	context.Context
	once sync.Once
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func newTriggerCtx(parent context.Context) *triggerCtx {
	return &triggerCtx{Context: parent, done: make(chan struct{})}
}

func (c *triggerCtx) end(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
	})
}

func (c *triggerCtx) Done() <-chan struct{} { return c.done }

func (c *triggerCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
