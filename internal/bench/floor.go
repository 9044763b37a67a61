package bench

//lint:file-ignore SA1019 the floor is x/net/http2's own Transport, the HTTP/2 peer; x/net's deprecation points to net/http.

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/adapters/h2"
	"github.com/replaysafe/replaysafe/internal/recorder"
)

// EvidenceFloor is the HTTP/2 peer with replaysafe's evidence added and
// nothing else: x/net's Transport over connections h2.Observe watches,
// each request followed by an h2.Attempt whose four httptrace hooks
// claim its stream, and let go of when its body is closed. Its events go
// nowhere: no recorder, no state machine, no pool of replaysafe's. Beside
// x/net it prices the evidence the guarantees are decided from; beside
// replaysafe, everything else.
//
// Made by NewDecisionFloor, it also decides: each request's events,
// stamped by the clock, feed an fsm.Machine through a recorder.Core, as
// replaysafe's attempts do (connection acquired, the hooks' progress, the
// final headers, the body's end). It then prices the evidence and the
// attempt's machine together.
type EvidenceFloor struct {
	*http2.Transport

	mu    sync.Mutex
	wires map[net.Conn]*h2.Wire // by the observed connection x/net holds

	claimed  atomic.Int64 // requests whose HEADERS the Wire tied to a stream
	complete atomic.Int64 // requests whose machine saw the whole exchange

	clock recorder.Clock // nil: events go nowhere
}

// NewEvidenceFloor returns an EvidenceFloor speaking h2c with prior
// knowledge, or h2 over TLS with e.TLS.
func NewEvidenceFloor(e Env) *EvidenceFloor { return newFloor(e, nil) }

// NewDecisionFloor returns an EvidenceFloor whose requests also feed
// their machines.
func NewDecisionFloor(e Env) *EvidenceFloor { return newFloor(e, recorder.NewClock()) }

func newFloor(e Env, clock recorder.Clock) *EvidenceFloor {
	f := &EvidenceFloor{wires: make(map[net.Conn]*h2.Wire), clock: clock}
	f.Transport = &http2.Transport{TLSClientConfig: e.TLS, AllowHTTP: e.TLS == nil}
	f.DialTLSContext = func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
		var c net.Conn
		var err error
		if e.TLS == nil {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
		} else {
			d := tls.Dialer{Config: cfg}
			c, err = d.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		oc, w := h2.Observe(c)
		f.mu.Lock()
		f.wires[oc] = w
		f.mu.Unlock()
		return oc, nil
	}
	return f
}

// Claimed returns how many requests learned their stream ID from the
// Wire: the evidence was gathered, not only paid for.
func (f *EvidenceFloor) Claimed() int64 { return f.claimed.Load() }

// Completed returns how many requests' machines (NewDecisionFloor) saw
// the whole exchange and decided to deliver it: the machines were fed,
// not only made.
func (f *EvidenceFloor) Completed() int64 { return f.complete.Load() }

// floorAttempt is one request of an EvidenceFloor, in one allocation:
// the h2.Attempt learns its Wire when x/net says which connection the
// request got (GotConn, before x/net's ClientConn.RoundTrip, so before any
// other hook); rec is its machine when the floor decides, in the same
// allocation (decidingAttempt), and nil when it does not, so that the
// evidence floor carries no recorder it does not use.
type floorAttempt struct {
	f     *EvidenceFloor
	att   h2.Attempt
	trace *httptrace.ClientTrace
	body  floorBody
	rec   *recorder.Core
}

// decidingAttempt is a floorAttempt with its recorder.
type decidingAttempt struct {
	floorAttempt
	core recorder.Core
}

func (a *floorAttempt) gotConn(info httptrace.GotConnInfo) {
	a.f.mu.Lock()
	w := a.f.wires[info.Conn]
	a.f.mu.Unlock()
	a.att.Init(w)
	if a.rec != nil {
		a.rec.Feed(fsm.Event{Kind: fsm.EventConnAcquired, Reused: info.Reused, Proto: fsm.ProtoH2})
	}
}

// Emit counts the request whose first byte was written with its stream
// known and, when the floor decides, feeds the event once.
func (a *floorAttempt) Emit(e fsm.Event) {
	if e.Kind == fsm.EventFirstByteWritten && a.att.Claim().Stream != 0 {
		a.f.claimed.Add(1)
	}
	if a.rec != nil {
		a.feedOnce(e, progressFact(e.Kind))
	}
}

// progressFact is the fact a progress event establishes, 0 for others.
func progressFact(k fsm.EventKind) fsm.Facts {
	switch k {
	case fsm.EventFirstByteWritten:
		return fsm.FactWroteAny
	case fsm.EventRequestWritten:
		return fsm.FactWroteAll
	case fsm.EventFirstResponseByte:
		return fsm.FactResponseByte
	}
	return 0
}

// feedOnce feeds e unless the machine established f already.
func (a *floorAttempt) feedOnce(e fsm.Event, f fsm.Facts) {
	a.rec.Mu.Lock()
	defer a.rec.Mu.Unlock()
	if f == 0 || !a.rec.HasLocked(f) {
		a.rec.FeedLocked(e)
	}
}

// RoundTrip sends req through x/net with the evidence hooks installed
// and, when the floor decides, feeds the attempt's machine what they and
// the response show.
func (f *EvidenceFloor) RoundTrip(req *http.Request) (*http.Response, error) {
	a := f.newAttempt(req)
	a.trace = a.att.Trace(a)
	a.trace.GotConn = a.gotConn
	resp, err := f.Transport.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), a.trace)))
	if err != nil {
		if a.rec != nil {
			a.rec.Feed(a.att.Failure(req.Context(), err))
		}
		a.att.Done()
		return nil, err
	}
	if a.rec != nil {
		a.feedOnce(fsm.Event{Kind: fsm.EventFirstResponseByte}, fsm.FactResponseByte)
		a.rec.Feed(fsm.Event{Kind: fsm.EventFinalHeaders})
	}
	a.body.ReadCloser, a.body.a = resp.Body, a
	resp.Body = &a.body
	return resp, nil
}

// newAttempt returns req's attempt, with its machine started when the
// floor decides.
func (f *EvidenceFloor) newAttempt(req *http.Request) *floorAttempt {
	if f.clock == nil {
		return &floorAttempt{f: f}
	}
	d := &decidingAttempt{}
	d.f, d.rec = f, &d.core
	d.core.InitUnarmed(fsm.Request{Method: fsm.ParseMethod(req.Method), Body: bodyKind(req)}, fsm.Limits{}, f.clock, nil)
	return &d.floorAttempt
}

// bodyKind is what the machine is told of req's body.
func bodyKind(req *http.Request) fsm.BodyKind {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return fsm.BodyNone
	case req.GetBody != nil:
		return fsm.BodyBuffered
	}
	return fsm.BodyOneShotUntouched
}

// CloseIdleConnections closes x/net's idle connections and forgets the
// Wires of every connection (a benchmark calls it when it is done with
// the client; until then the map holds one entry per dial, and a
// benchmark dials its connections once).
func (f *EvidenceFloor) CloseIdleConnections() {
	f.Transport.CloseIdleConnections()
	f.mu.Lock()
	clear(f.wires)
	f.mu.Unlock()
}

// floorBody ends its attempt: its machine sees the response complete at
// io.EOF (or canceled at a Close before it), and the Wire forgets the
// stream at Close.
type floorBody struct {
	io.ReadCloser
	a    *floorAttempt
	once sync.Once
}

func (b *floorBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.a.rec != nil {
		b.a.feedOnce(fsm.Event{Kind: fsm.EventResponseComplete}, fsm.FactComplete)
	}
	return n, err
}

func (b *floorBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.end)
	return err
}

func (b *floorBody) end() {
	if b.a.rec != nil {
		b.a.feedOnce(fsm.Event{Kind: fsm.EventCanceled}, fsm.FactComplete)
		b.a.rec.Stop()
		if d := b.a.rec.Decision(); d.Action == fsm.ActionDeliver && b.a.rec.Facts()&fsm.FactComplete != 0 {
			b.a.f.complete.Add(1)
		}
	}
	b.a.att.Done()
}
