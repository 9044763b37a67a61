package bench

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
)

// Floor is a reference client that prices a part of replaysafe's work:
// a protocol's peer with replaysafe's evidence added and nothing else (an
// evidence floor), or with each request's events also fed to an
// fsm.Machine, as replaysafe's attempts do (a decision floor; its
// requests with a body have the upload a decision needs, floorUpload).
// Beside the peer a floor prices that work; beside replaysafe, everything
// else. A floor has no pool, plan, call machine or report of
// replaysafe's: the peer keeps its own connections.
//
// Floors run in BenchmarkRoundTrip only. Claimed and Completed show that
// the work was done and not only paid for.
type Floor interface {
	RoundTripper
	// Decides reports whether each request feeds a machine.
	Decides() bool
	// Claimed returns how many requests' evidence tied them to their
	// place on the wire: the connection that carried their bytes
	// (HTTP/1.1) or their stream ID (HTTP/2, HTTP/3).
	Claimed() int64
	// Completed returns how many requests' machines saw the whole
	// exchange and decided to deliver it; 0 on an evidence floor.
	Completed() int64
	// Uploads returns how many requests with a body had their machine
	// told of the body's first read and, over a multiplexed stack,
	// their own context canceled when the exchange ended; 0 on an
	// evidence floor.
	Uploads() int64
}

// Floor names end in one of these, after the peer's name.
const (
	EvidenceSuffix = "-evidence"
	DecisionSuffix = "-decision"
)

// floorClients returns the two floors of a peer as Clients named after
// it.
func floorClients(peer string, mk func(e Env, decide bool) Floor) []Client {
	return []Client{
		{Name: peer + EvidenceSuffix, New: func(e Env) RoundTripper { return mk(e, false) }},
		{Name: peer + DecisionSuffix, New: func(e Env) RoundTripper { return mk(e, true) }},
	}
}

// floorCounts is what every floor counts, and whether it decides.
type floorCounts struct {
	clock    recorder.Clock // nil: an evidence floor
	claimed  atomic.Int64
	complete atomic.Int64
	uploads  atomic.Int64
}

// Decides implements Floor.
func (c *floorCounts) Decides() bool { return c.clock != nil }

// Claimed implements Floor.
func (c *floorCounts) Claimed() int64 { return c.claimed.Load() }

// Completed implements Floor.
func (c *floorCounts) Completed() int64 { return c.complete.Load() }

// Uploads implements Floor.
func (c *floorCounts) Uploads() int64 { return c.uploads.Load() }

// newClock returns the clock a floor's machines read, nil when it does
// not decide.
func newClock(decide bool) recorder.Clock {
	if decide {
		return recorder.NewClock()
	}
	return nil
}

// count adds one request's outcome: whether its evidence claimed its
// place on the wire, and whether its machine (rec, nil on an evidence
// floor) saw the whole exchange and decided to deliver it.
func (c *floorCounts) count(claimed bool, rec *recorder.Core) {
	if claimed {
		c.claimed.Add(1)
	}
	if rec != nil && rec.Decision().Action == fsm.ActionDeliver && rec.Facts()&fsm.FactComplete != 0 {
		c.complete.Add(1)
	}
}

// ended ends u, the upload of a request whose machine is rec, and counts
// it when the machine learned of its body's first read and its own
// context, if it has one, is canceled.
func (c *floorCounts) ended(u *floorUpload, rec *recorder.Core) {
	u.end()
	if u.rc == nil || rec == nil || rec.Facts()&fsm.FactBodyRead == 0 {
		return
	}
	if u.ctx == nil || u.ctx.Err() != nil {
		c.uploads.Add(1)
	}
}

// registry maps a floor's connections, or origins, to the evidence of
// their connection; it is safe for concurrent use.
type registry[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

func (r *registry[K, V]) get(k K) V {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[k]
}

func (r *registry[K, V]) put(k K, v V) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[K]V)
	}
	r.m[k] = v
}

// forget empties the registry.
func (r *registry[K, V]) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.m)
}

// floorMachine is the machine of one request on a floor that decides, nil
// on one that does not, fed as replaysafe's multiplexed attempts feed
// theirs (through a recorder.Core). Each progress event is fed once: the
// hooks and the response can both show it.
type floorMachine struct{ rec *recorder.Core }

// deciding is a request of a floor that decides, in one allocation with
// its machine's recorder, so that an evidence floor's requests carry no
// recorder they do not use.
type deciding[R any] struct {
	req  R
	core recorder.Core
}

// newFloorRequest returns a zero request of a floor, its machine started
// in the same allocation when the floor decides (clock not nil).
func newFloorRequest[R any, P interface {
	*R
	machine() *floorMachine
}](req *http.Request, clock recorder.Clock) P {
	if clock == nil {
		return P(new(R))
	}
	d := &deciding[R]{}
	P(&d.req).machine().start(&d.core, req, clock)
	return &d.req
}

// machine returns m: a floor request's own floorMachine.
func (m *floorMachine) machine() *floorMachine { return m }

// start initialises core for req and makes it m's machine.
func (m *floorMachine) start(core *recorder.Core, req *http.Request, clock recorder.Clock) {
	core.InitUnarmed(machineRequest(req), fsm.Limits{}, clock, nil)
	core.SkipEvents() // as replaysafe without an observer
	m.rec = core
}

// Emit feeds a progress or informational event from the evidence.
func (m *floorMachine) Emit(e fsm.Event) {
	if m.rec != nil {
		m.feedOnce(e, progressFact(e.Kind))
	}
}

// feed feeds e.
func (m *floorMachine) feed(e fsm.Event) {
	if m.rec != nil {
		m.rec.Feed(e)
	}
}

// headers feeds the final response headers, with the response byte they
// prove should the hook not have reported it yet.
func (m *floorMachine) headers() {
	if m.rec != nil {
		m.feedOnce(fsm.Event{Kind: fsm.EventFirstResponseByte}, fsm.FactResponseByte)
		m.rec.Feed(fsm.Event{Kind: fsm.EventFinalHeaders})
	}
}

// eof feeds the response's end.
func (m *floorMachine) eof() {
	if m.rec != nil {
		m.feedOnce(fsm.Event{Kind: fsm.EventResponseComplete}, fsm.FactComplete)
	}
}

// closed feeds a cancellation when the body was closed before its end,
// and stops the machine.
func (m *floorMachine) closed() {
	if m.rec != nil {
		m.feedOnce(fsm.Event{Kind: fsm.EventCanceled}, fsm.FactComplete)
		m.rec.Stop()
	}
}

// feedOnce feeds e unless the machine established f already.
func (m *floorMachine) feedOnce(e fsm.Event, f fsm.Facts) {
	m.rec.Mu.Lock()
	defer m.rec.Mu.Unlock()
	if f == 0 || !m.rec.HasLocked(f) {
		m.rec.FeedLocked(e)
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

// machineRequest is what a floor's machine is told of req.
func machineRequest(req *http.Request) fsm.Request {
	return fsm.Request{Method: fsm.ParseMethod(req.Method), Body: bodyKind(req)}
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

// floorUpload is the request side of a request with a body on a floor
// that decides, as replaysafe's attempts have it. Its body tells the
// machine of the first Read and keeps the caller's reader's own error: a
// read one-shot body cannot be sent again (RS11), and a failure of the
// caller's reader is not the wire's (RS21), so deciding needs both. Over
// a multiplexed stack the request also runs on a context of its own,
// canceled when the exchange ends: the stack may still be uploading when
// the response is over, and an attempt that is over must stop sending.
type floorUpload struct {
	rc     io.ReadCloser
	first  interface{ BodyRead() }
	ctx    context.Context // its own, nil without one
	cancel context.CancelCauseFunc

	mu   sync.Mutex
	read bool
	err  error // the first error other than io.EOF from rc
}

// send returns the request the floor sends for req: on a context with
// trace and, when req has a body and the floor decides (first is the
// machine), with u as its body and, when own, a context of its own.
func (u *floorUpload) send(req *http.Request, trace *httptrace.ClientTrace, first interface{ BodyRead() }, own bool) *http.Request {
	ctx := httptrace.WithClientTrace(req.Context(), trace)
	if req.Body == nil || req.Body == http.NoBody || first == nil {
		return req.WithContext(ctx)
	}
	u.rc, u.first = req.Body, first
	if own {
		ctx, u.cancel = context.WithCancelCause(ctx)
		u.ctx = ctx
	}
	out := req.WithContext(ctx)
	out.Body = u
	return out
}

// Read reads the caller's body.
func (u *floorUpload) Read(p []byte) (int, error) {
	u.mu.Lock()
	first := !u.read
	u.read = true
	u.mu.Unlock()
	if first {
		u.first.BodyRead()
	}
	n, err := u.rc.Read(p)
	if err != nil && err != io.EOF {
		u.mu.Lock()
		if u.err == nil {
			u.err = err
		}
		u.mu.Unlock()
	}
	return n, err
}

// Close closes the caller's body.
func (u *floorUpload) Close() error { return u.rc.Close() }

// local returns the caller's reader's own error, nil if it had none.
func (u *floorUpload) local() error {
	if u.rc == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

// end cancels the request's own context, if it has one.
func (u *floorUpload) end() {
	if u.cancel != nil {
		u.cancel(nil)
	}
}

// BodyRead feeds the request body's first read.
func (m *floorMachine) BodyRead() {
	m.feedOnce(fsm.Event{Kind: fsm.EventBodyRead}, fsm.FactBodyRead)
}

// readee returns m as what a request's upload tells of its first Read,
// nil on a floor that does not decide.
func (m *floorMachine) readee() interface{ BodyRead() } {
	if m.rec == nil {
		return nil
	}
	return m
}

// failure returns ev, the adapter's reading of err, unless err is the
// caller's reader's own failure (RS21).
func (u *floorUpload) failure(ev fsm.Event, err error) fsm.Event {
	if local := u.local(); local != nil && errors.Is(err, local) {
		return fsm.Event{Kind: fsm.EventLocalFailure}
	}
	return ev
}

// floorRequest is one request of a floor, told how its round trip and
// then its response body end.
type floorRequest interface {
	// failed is called when the round trip failed with err.
	failed(ctx context.Context, err error)
	// headers is called when the round trip returned a response.
	headers()
	// eof is called when the body read io.EOF.
	eof()
	// closed is called once, when the body is closed.
	closed()
}

// floorRoundTrip sends out, the request floorUpload.send made, through
// rt and tells r how the round trip ended; a response's body, as body,
// tells r how it ends.
func floorRoundTrip(rt http.RoundTripper, out *http.Request, r floorRequest, body *floorBody) (*http.Response, error) {
	resp, err := rt.RoundTrip(out)
	if err != nil {
		r.failed(out.Context(), err)
		return nil, err
	}
	r.headers()
	body.ReadCloser, body.r = resp.Body, r
	resp.Body = body
	return resp, nil
}

// floorBody is a floor's response body: it tells its request when the
// body ends.
type floorBody struct {
	io.ReadCloser
	r    floorRequest
	done atomic.Bool
}

func (b *floorBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.r.eof()
	}
	return n, err
}

func (b *floorBody) Close() error {
	err := b.ReadCloser.Close()
	if b.done.CompareAndSwap(false, true) {
		b.r.closed()
	}
	return err
}
