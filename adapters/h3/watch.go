package h3

import (
	"context"
	"sync"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
)

// Watch follows one HTTP/3 connection through quic-go's qlog tracing: it
// keeps the GOAWAY stream ID the server sent and hands each Attempt the ID
// of the stream its HEADERS frame opened. Install Tracer as the
// quic.Config.Tracer of exactly one connection. Its methods are safe for
// concurrent use.
type Watch struct {
	mu        sync.Mutex
	producers int32
	gotGoAway bool
	goAway    uint64
	pending   *Attempt // wrote header fields, frame not yet seen
	// The streams claimed and not yet forgotten: one in first, any others
	// in more, made at the first claim beside it. A connection that
	// carries one request at a time (an idle pooled one) holds no map.
	first claim
	more  map[quic.StreamID]*Attempt
	ended func() // OnEnd's, until the http3 layer's recorder closes
}

// claim is a stream claimed by an Attempt; a nil a is none.
type claim struct {
	id quic.StreamID
	a  *Attempt
}

// NewWatch returns a Watch for one connection.
func NewWatch() *Watch { return &Watch{} }

// Tracer is the quic.Config.Tracer of the watched connection. It returns
// the Watch itself as the connection's qlog trace.
func (w *Watch) Tracer(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return w }

// AddProducer implements qlogwriter.Trace. The QUIC layer asks first, when
// the connection is created, and gets no recorder: its per-packet events
// are not needed. Every later producer (the http3 layer) records into the
// Watch.
func (w *Watch) AddProducer() qlogwriter.Recorder {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.producers++
	if w.producers == 1 {
		return nil
	}
	return recorder{w}
}

// OnEnd makes the Watch call f once quic-go's http3 layer closed its
// recorder: the connection ended, however it ended (its context is
// done), and every call of the http3 layer that could record on it
// returned (quic-go counts the open connection as one of the recorder's
// producers, and closes it when the last is gone). f runs on a
// goroutine of quic-go's, at most once, and never when no http3
// ClientConn was made over the connection. Call OnEnd before
// NewClientConn.
func (w *Watch) OnEnd(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = f
}

// GoAway returns the stream ID of the latest GOAWAY the server sent: the
// first request stream it did not and will not process (RFC 9114 §5.2).
// ok is false until a GOAWAY arrived.
func (w *Watch) GoAway() (id uint64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.goAway, w.gotGoAway
}

// recorder receives the http3 layer's qlog events.
type recorder struct{ w *Watch }

// RecordEvent implements qlogwriter.Recorder: it keeps GOAWAY frames
// parsed on the control stream and assigns HEADERS frames created on new
// request streams.
func (r recorder) RecordEvent(ev qlogwriter.Event) {
	switch e := ev.(type) {
	case qlog.FrameParsed:
		if g, ok := e.Frame.Frame.(qlog.GoAwayFrame); ok {
			r.w.sawGoAway(uint64(g.StreamID))
		}
	case qlog.FrameCreated:
		if _, ok := e.Frame.Frame.(qlog.HeadersFrame); ok {
			r.w.sawHeaders(e.StreamID)
		}
	}
}

// Close implements qlogwriter.Recorder: it calls OnEnd's function.
func (r recorder) Close() error {
	r.w.mu.Lock()
	f := r.w.ended
	r.w.ended = nil
	r.w.mu.Unlock()
	if f != nil {
		f()
	}
	return nil
}

func (w *Watch) sawGoAway(id uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.goAway, w.gotGoAway = id, true
}

// sawHeaders gives stream id to the Attempt waiting for its HEADERS
// frame, unless the stream is already claimed (trailers).
func (w *Watch) sawHeaders(id quic.StreamID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.claimedLocked(id) || w.pending == nil {
		return
	}
	a := w.pending
	w.pending = nil
	w.claimLocked(id, a)
	a.setStream(uint64(id))
}

// own gives a the stream it opened itself (Attempt.RoundTrip), before
// its HEADERS frame is created: claimed, the frame is not handed to an
// Attempt waiting for one.
func (w *Watch) own(a *Attempt, id quic.StreamID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.claimLocked(id, a)
	a.setStream(uint64(id))
}

// expect marks a as the Attempt whose HEADERS frame comes next.
func (w *Watch) expect(a *Attempt) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = a
}

// forget drops a's claim.
func (w *Watch) forget(a *Attempt) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == a {
		w.pending = nil
	}
	if id, ok := a.Stream(); ok {
		w.unclaimLocked(quic.StreamID(id))
	}
}

// claimedLocked reports whether stream id is claimed.
func (w *Watch) claimedLocked(id quic.StreamID) bool {
	if w.first.a != nil && w.first.id == id {
		return true
	}
	_, ok := w.more[id]
	return ok
}

// claimLocked records stream id as a's.
func (w *Watch) claimLocked(id quic.StreamID, a *Attempt) {
	if w.first.a == nil {
		w.first = claim{id: id, a: a}
		return
	}
	if w.more == nil {
		w.more = map[quic.StreamID]*Attempt{}
	}
	w.more[id] = a
}

// unclaimLocked drops the claim on stream id, if any.
func (w *Watch) unclaimLocked(id quic.StreamID) {
	if w.first.a != nil && w.first.id == id {
		w.first = claim{}
		return
	}
	delete(w.more, id)
}
