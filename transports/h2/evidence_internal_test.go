package h2

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/net/http2"
)

func getWith(h *harness, path string, ev StreamEvents) *stream {
	req, _ := http.NewRequest("GET", "https://example.com"+path, nil)
	return h.open(req, ev)
}

// A write that fails part-way ends only what it must: the stream whose
// HEADERS had (partly) left gets the write error, the one whose HEADERS
// start at or after the accepted byte count gets ErrUnsent.
func TestEvidenceWriteFailureSplitsStreams(t *testing.T) {
	for _, cut := range []string{"inside first HEADERS", "between the two"} {
		h := settled(t, Config{})
		ra, rb := &recorder{}, &recorder{}
		a, b := getWith(h, "/a", ra), getWith(h, "/b", rb)
		recs := h.m.out.recs
		if len(recs) != 2 || recs[0].st != a || recs[1].st != b {
			t.Fatalf("records %+v", recs)
		}
		n := recs[1].off
		if cut == "inside first HEADERS" {
			n = recs[0].off + 3
		}
		h.sentN(n, syscall.EPIPE)
		var we *WriteError
		if !errors.As(a.err, &we) || !we.HeadersWritten || we.StreamID != a.id || errors.Is(a.err, ErrUnsent) {
			t.Fatalf("%s: stream a: %v", cut, a.err)
		}
		if !errors.Is(b.err, ErrUnsent) || !errors.As(b.err, &we) || we.HeadersWritten || !errors.Is(b.err, syscall.EPIPE) {
			t.Fatalf("%s: stream b: %v", cut, b.err)
		}
		wantA := "headers-written"
		if cut == "between the two" {
			wantA += " request-written"
		}
		if ra.events() != wantA || rb.events() != "" {
			t.Fatalf("%s: events a %q, b %q", cut, ra.events(), rb.events())
		}
		if !h.m.closed {
			t.Fatal("connection survived a failed write")
		}
	}
}

// Streams whose HEADERS are queued but not yet handed to the writer when
// the connection fails were never written.
func TestEvidencePendingStreamsUnsent(t *testing.T) {
	h := settled(t, Config{})
	st := h.get("/pending")
	h.m.readFailed(h.now, io.EOF)
	var re *ReadError
	if !errors.Is(st.err, ErrUnsent) || !errors.As(st.err, &re) {
		t.Fatalf("err %v", st.err)
	}
	if len(h.m.out.buf) != 0 {
		t.Fatal("frames of a dead connection still queued")
	}
}

// A stream whose HEADERS are in the writer's hands when the connection
// fails waits for the write's verdict.
func TestEvidenceInFlightWaitsForTheWriter(t *testing.T) {
	for _, written := range []bool{false, true} {
		h := settled(t, Config{})
		rec := &recorder{}
		st := getWith(h, "/inflight", rec)
		var b outBuf
		h.m.take(&b)
		h.m.readFailed(h.now, io.EOF)
		if st.err != nil {
			t.Fatalf("decided before the writer reported: %v", st.err)
		}
		if _, _, wait := h.m.readBody(st, nil); !wait {
			t.Fatal("readBody does not wait for the verdict")
		}
		n := 0
		if written {
			n = len(b.buf)
		}
		h.m.written(h.now, &b, n, errConnClosed)
		switch {
		case written && (errors.Is(st.err, ErrUnsent) || !strings.Contains(rec.events(), "headers-written")):
			t.Fatalf("written: %v, events %q", st.err, rec.events())
		case !written && !errors.Is(st.err, ErrUnsent):
			t.Fatalf("not written: %v", st.err)
		}
	}
}

var errConnClosed = errors.New("use of closed network connection")

// HeadersWritten always precedes ResponseStarted, even when the response
// is read before the writer sees its write return; nothing is reported
// twice.
func TestEvidenceOrder(t *testing.T) {
	h := settled(t, Config{})
	rec := &recorder{}
	st := getWith(h, "/", rec)
	var b outBuf
	h.m.take(&b)
	h.headers(st.id, false, ":status", "103")
	h.respond(st.id, "hi")
	h.pump()
	h.m.written(h.now, &b, len(b.buf), nil)
	want := "headers-written request-written response-started 1xx-103 response-200"
	if got := rec.events(); got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// Body evidence: bytes as they are accepted, RequestWritten once the
// END_STREAM frame is accepted in full.
func TestEvidenceBodyWritten(t *testing.T) {
	h := settled(t, Config{})
	rec := &recorder{}
	req, _ := http.NewRequest("POST", "https://example.com/", io.NopCloser(strings.NewReader("")))
	req.ContentLength = 100
	st := h.open(req, rec)
	h.sent()
	h.m.sendBody(h.now, st, make([]byte, 100), true)
	var b outBuf
	h.m.take(&b)
	// 9 header bytes and 40 of payload accepted, then the write fails.
	h.m.written(h.now, &b, frameHeaderLen+40, syscall.ECONNRESET)
	if rec.body != 40 || strings.Contains(rec.events(), "request-written") {
		t.Fatalf("body %d, events %q", rec.body, rec.events())
	}
	var we *WriteError
	if !errors.As(st.err, &we) || !we.HeadersWritten {
		t.Fatalf("err %v", st.err)
	}
}

// No evidence is reported once the stream has failed (RoundTrip has
// returned its error).
func TestEvidenceQuietAfterFailure(t *testing.T) {
	h := settled(t, Config{})
	rec := &recorder{}
	st := getWith(h, "/", rec)
	var b outBuf
	h.m.take(&b)
	h.m.cancel(h.now, st, errors.New("gone"))
	h.m.written(h.now, &b, len(b.buf), nil)
	if rec.events() != "" {
		t.Fatalf("events after failure: %q", rec.events())
	}
}

// REFUSED_STREAM is the server's promise that nothing was processed.
func TestEvidenceRefusedStream(t *testing.T) {
	h := settled(t, Config{})
	st := h.get("/")
	h.sent()
	h.sfr.WriteRSTStream(st.id, http2.ErrCodeRefusedStream)
	h.pump()
	var se *StreamError
	if !errors.As(st.err, &se) || !se.Unprocessed() || !se.Remote {
		t.Fatalf("err %v", st.err)
	}
}

// A connection that closes after a GOAWAY reports the boundary to the
// streams at or below it: the boundary proves nothing for them.
func TestEvidenceGoAwayThenClose(t *testing.T) {
	h := settled(t, Config{})
	st := h.get("/")
	h.sent()
	h.sfr.WriteGoAway(st.id, http2.ErrCodeNo, nil)
	h.pump()
	h.m.readFailed(h.now, io.EOF)
	var ge *GoAwayError
	if !errors.As(st.err, &ge) || ge.Unprocessed() || ge.StreamID != st.id || ge.LastStreamID != st.id {
		t.Fatalf("err %v", st.err)
	}
}
