package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/http3/qlog"

	"github.com/replaysafe/replaysafe/fsm"
)

func TestClassify(t *testing.T) {
	rejected := &quic.StreamError{StreamID: 4, ErrorCode: quic.StreamErrorCode(http3.ErrCodeRequestRejected), Remote: true}
	cases := []struct {
		name string
		err  error
		want fsm.EventKind
	}{
		{"nil", nil, fsm.EventInvalid},
		{"canceled", context.Canceled, fsm.EventCanceled},
		{"deadline", fmt.Errorf("wrapped: %w", context.DeadlineExceeded), fsm.EventTimeout},
		{"request rejected", rejected, fsm.EventRequestRejected},
		{"request rejected in http3.Error", fmt.Errorf("http3: %w", rejected), fsm.EventRequestRejected},
		// Only the server's H3_REQUEST_REJECTED proves anything.
		{"local request rejected", &quic.StreamError{ErrorCode: quic.StreamErrorCode(http3.ErrCodeRequestRejected)}, fsm.EventReset},
		{"stream reset", &quic.StreamError{ErrorCode: quic.StreamErrorCode(http3.ErrCodeInternalError), Remote: true}, fsm.EventReset},
		{"handshake timeout", &quic.HandshakeTimeoutError{}, fsm.EventAcquireFailed},
		{"version negotiation", &quic.VersionNegotiationError{}, fsm.EventAcquireFailed},
		{"idle timeout", &quic.IdleTimeoutError{}, fsm.EventTimeout},
		{"crypto error", &quic.TransportError{ErrorCode: 0x100 + 42, Remote: true}, fsm.EventTLSFailure},
		{"protocol violation", &quic.TransportError{ErrorCode: quic.ProtocolViolation}, fsm.EventReset},
		{"stateless reset", &quic.StatelessResetError{}, fsm.EventReset},
		{"connection closed", &quic.ApplicationError{ErrorCode: quic.ApplicationErrorCode(http3.ErrCodeNoError), Remote: true}, fsm.EventClosed},
		{"tls alert", tls.AlertError(40), fsm.EventTLSFailure},
		{"certificate", &tls.CertificateVerificationError{}, fsm.EventTLSFailure},
		{"os deadline", os.ErrDeadlineExceeded, fsm.EventTimeout},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, fsm.EventTimeout},
		{"eof", io.EOF, fsm.EventClosed},
		{"unknown", errors.New("something else"), fsm.EventClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Classify(c.err).Kind; got != c.want {
				t.Fatalf("Classify(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return false }

// headersCreated is the qlog event quic-go records before it writes a
// HEADERS frame on stream id.
func headersCreated(id quic.StreamID) qlog.FrameCreated {
	return qlog.FrameCreated{StreamID: id, Frame: qlog.Frame{Frame: qlog.HeadersFrame{}}}
}

func goAwayParsed(id quic.StreamID) qlog.FrameParsed {
	return qlog.FrameParsed{StreamID: 3, Frame: qlog.Frame{Frame: qlog.GoAwayFrame{StreamID: id}}}
}

func TestWatchTracerSkipsTheQUICLayer(t *testing.T) {
	w := NewWatch()
	tr := w.Tracer(context.Background(), true, quic.ConnectionID{})
	if r := tr.AddProducer(); r != nil {
		t.Fatalf("first producer (the QUIC layer) = %v, want nil", r)
	}
	if r := tr.AddProducer(); r == nil {
		t.Fatal("second producer (the http3 layer) is nil")
	}
}

// TestWatchOnEnd: the function OnEnd sets runs when the http3 layer
// closes its recorder, once, and not for the QUIC layer's request.
func TestWatchOnEnd(t *testing.T) {
	w := NewWatch()
	ended := 0
	w.OnEnd(func() { ended++ })
	w.AddProducer()
	rec := w.AddProducer()
	if ended != 0 {
		t.Fatalf("ended %d times before the recorder closed", ended)
	}
	rec.Close()
	rec.Close()
	if ended != 1 {
		t.Fatalf("ended %d times, want once", ended)
	}
}

func TestStreamsAreClaimedInWriteOrder(t *testing.T) {
	w := NewWatch()
	w.AddProducer()
	rec := w.AddProducer()
	a, b := w.NewAttempt(), w.NewAttempt()
	var events []fsm.EventKind
	emit := func(e fsm.Event) { events = append(events, e.Kind) }
	ta, tb := a.Trace(EmitFunc(emit), nil), b.Trace(nil, nil)

	// b writes first (stream 0), then a (stream 4); a's trailers on 4
	// and a stray frame with no writer pending change nothing.
	tb.WroteHeaderField(":method", []string{"POST"})
	rec.RecordEvent(headersCreated(0))
	ta.WroteHeaderField(":method", []string{"GET"})
	ta.WroteHeaderField(":path", []string{"/"})
	rec.RecordEvent(headersCreated(4))
	rec.RecordEvent(headersCreated(4))
	rec.RecordEvent(headersCreated(8))

	if id, ok := a.Stream(); !ok || id != 4 {
		t.Fatalf("a's stream = %d, %v; want 4", id, ok)
	}
	if id, ok := b.Stream(); !ok || id != 0 {
		t.Fatalf("b's stream = %d, %v; want 0", id, ok)
	}
	if len(events) != 1 || events[0] != fsm.EventFirstByteWritten {
		t.Fatalf("a emitted %v, want one first-byte-written", events)
	}
	a.Done()
	b.Done()
	if n := claims(w); n != 0 || w.pending != nil {
		t.Fatalf("after Done: %d streams claimed, pending %v", n, w.pending)
	}
}

// TestClaimsBeyondTheFirst: a Watch holds its first claimed stream
// without a map and any others in one; a claim forgotten from either
// frees its stream, and trailers on a claimed stream, wherever it is
// held, go to no waiting Attempt.
func TestClaimsBeyondTheFirst(t *testing.T) {
	w := NewWatch()
	w.AddProducer()
	rec := w.AddProducer()
	a, b, c := w.NewAttempt(), w.NewAttempt(), w.NewAttempt()
	w.own(a, 0)
	w.own(b, 4)
	a.Done() // the first claim is free again
	w.own(c, 8)
	if n := claims(w); n != 2 {
		t.Fatalf("%d streams claimed, want 2", n)
	}

	d := w.NewAttempt()
	d.Trace(nil, nil).WroteHeaderField(":method", []string{"POST"})
	rec.RecordEvent(headersCreated(4)) // b's trailers
	rec.RecordEvent(headersCreated(8)) // c's trailers
	if _, ok := d.Stream(); ok {
		t.Fatal("a claimed stream's trailers went to the waiting attempt")
	}
	rec.RecordEvent(headersCreated(12))
	if id, ok := d.Stream(); !ok || id != 12 {
		t.Fatalf("d's stream = %d, %v; want 12", id, ok)
	}
	for _, x := range []*Attempt{b, c, d} {
		x.Done()
	}
	if n := claims(w); n != 0 {
		t.Fatalf("after Done: %d streams claimed", n)
	}
}

func TestFailure(t *testing.T) {
	closed := &quic.ApplicationError{ErrorCode: quic.ApplicationErrorCode(http3.ErrCodeNoError), Remote: true}
	rejected := &quic.StreamError{StreamID: 4, ErrorCode: quic.StreamErrorCode(http3.ErrCodeRequestRejected), Remote: true}
	cases := []struct {
		name   string
		stream quic.StreamID // -1: no header field written
		goAway quic.StreamID // -1: none
		ctx    context.Context
		err    error
		want   fsm.Event
	}{
		{"nothing written", -1, -1, nil, closed, fsm.Event{Kind: fsm.EventHandedBack}},
		{"refused after goaway before opening", -1, 0, nil, errors.New("http3: conn unusable: connection in graceful shutdown"), fsm.Event{Kind: fsm.EventHandedBack}},
		{"rejected", 4, -1, nil, rejected, fsm.Event{Kind: fsm.EventRequestRejected}},
		{"rejected under goaway", 4, 4, nil, rejected, fsm.Event{Kind: fsm.EventRequestRejected}},
		{"closed, no goaway", 4, -1, nil, closed, fsm.Event{Kind: fsm.EventClosed}},
		{"goaway at our stream", 4, 4, nil, closed, fsm.Event{Kind: fsm.EventH3GoAway, Boundary: 4, Stream: 4, BoundaryKnown: true}},
		{"goaway above our stream", 4, 8, nil, closed, fsm.Event{Kind: fsm.EventH3GoAway, Boundary: 8, Stream: 4, BoundaryKnown: true}},
		{"canceled wins", 4, 4, canceledCtx(), closed, fsm.Event{Kind: fsm.EventCanceled}},
		{"timeout wins", 4, 4, nil, &quic.IdleTimeoutError{}, fsm.Event{Kind: fsm.EventTimeout}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := NewWatch()
			w.AddProducer()
			rec := w.AddProducer()
			a := w.NewAttempt()
			tr := a.Trace(nil, nil)
			if c.stream >= 0 {
				tr.WroteHeaderField(":method", []string{"GET"})
				rec.RecordEvent(headersCreated(c.stream))
			}
			if c.goAway >= 0 {
				rec.RecordEvent(goAwayParsed(c.goAway))
			}
			if got := a.Failure(c.ctx, c.err); got != c.want {
				t.Fatalf("Failure = %v, want %v", got, c.want)
			}
		})
	}
}

func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// The GOAWAY boundary decides through fsm: our stream at or above it was
// not processed (RFC 9114 §5.2), below it we cannot know.
func TestGoAwayBoundaryDecides(t *testing.T) {
	for _, c := range []struct {
		stream, goAway quic.StreamID
		want           fsm.Action
		rule           fsm.Rule
	}{
		{4, 4, fsm.ActionResend, fsm.RuleEvidenceGoAwayBoundary},
		{4, 8, fsm.ActionFail, fsm.RuleAmbiguousNotIdempotent},
	} {
		w := NewWatch()
		w.AddProducer()
		rec := w.AddProducer()
		a := w.NewAttempt()
		m := fsm.New(fsm.Request{Method: fsm.MethodPOST, Body: fsm.BodyBuffered}, fsm.Limits{}, 0)
		emit := func(e fsm.Event) { m.Step(e) }
		m.Step(fsm.Event{Kind: fsm.EventConnAcquired, Reused: true, Proto: fsm.ProtoH3})
		tr := a.Trace(EmitFunc(emit), nil)
		tr.WroteHeaderField(":method", []string{"POST"})
		rec.RecordEvent(headersCreated(c.stream))
		rec.RecordEvent(goAwayParsed(c.goAway))
		d := m.Step(a.Failure(context.Background(), &quic.ApplicationError{Remote: true}))
		if d.Action != c.want || d.Rule != c.rule {
			t.Errorf("stream %d, GOAWAY %d: decision %v, want %v by %v", c.stream, c.goAway, d, c.want, c.rule)
		}
	}
}

// claims returns how many streams w has claimed.
func claims(w *Watch) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.more)
	if w.first.a != nil {
		n++
	}
	return n
}
