package h2

import (
	"bytes"
	"io"
	"net"
	"slices"
	"testing"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/fsm"
)

// frames builds a byte stream with an http2.Framer.
func frames(t *testing.T, preface bool, write func(fr *http2.Framer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if preface {
		b.WriteString(http2.ClientPreface)
	}
	if err := write(http2.NewFramer(&b, nil)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func clientBytes(t *testing.T) []byte {
	return frames(t, true, func(fr *http2.Framer) error {
		return firstErr(
			fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}),
			fr.WriteWindowUpdate(0, 1<<20),
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("hpack-1"), EndHeaders: true}),
			fr.WriteData(1, false, []byte("abc")),
			fr.WriteDataPadded(1, false, []byte("de"), []byte{0, 0}),
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("trailers"), EndHeaders: true, EndStream: true}),
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte("hpack-3"), EndStream: true}),
			fr.WriteContinuation(3, true, []byte("more")),
			fr.WriteRSTStream(3, http2.ErrCodeCancel),
			fr.WritePing(false, [8]byte{1}),
		)
	})
}

func serverBytes(t *testing.T) []byte {
	return frames(t, false, func(fr *http2.Framer) error {
		return firstErr(
			fr.WriteSettings(),
			fr.WriteSettingsAck(),
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("status"), EndHeaders: true}),
			fr.WriteData(1, true, []byte("body")),
			fr.WriteRSTStream(3, http2.ErrCodeRefusedStream),
			fr.WriteRSTStream(9, http2.ErrCodeInternal), // a stream the client never opened
			fr.WriteGoAway(3, http2.ErrCodeNo, []byte("debug")),
			fr.WriteGoAway(1, http2.ErrCodeProtocol, nil),
		)
	})
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func TestWireFollowsFramesWhateverTheChunking(t *testing.T) {
	out, in := clientBytes(t), serverBytes(t)
	want1 := StreamFacts{ID: 1, HeadersWritten: true, DataWritten: 3 + 5, EndStreamWritten: true, ResponseStarted: true}
	want3 := StreamFacts{ID: 3, HeadersWritten: true, EndStreamWritten: true, ResetWritten: true, ResetWrittenCode: http2.ErrCodeCancel,
		ResetByPeer: true, ResetCode: http2.ErrCodeRefusedStream}
	for size := 1; size <= 40; size++ {
		w := &Wire{streams: make(map[uint32]*StreamFacts)}
		w.out.preface = len(http2.ClientPreface)
		for i := 0; i < len(out); i += size {
			w.sawWrite(out[i:min(i+size, len(out))])
		}
		for i := 0; i < len(in); i += size {
			w.sawRead(in[i:min(i+size, len(in))])
		}
		if got, ok := w.Stream(1); !ok || got != want1 {
			t.Fatalf("chunk %d: stream 1 = %+v, want %+v", size, got, want1)
		}
		if got, ok := w.Stream(3); !ok || got != want3 {
			t.Fatalf("chunk %d: stream 3 = %+v, want %+v", size, got, want3)
		}
		if _, ok := w.Stream(9); ok {
			t.Fatalf("chunk %d: the server's frames opened stream 9", size)
		}
		if g, ok := w.GoAway(); !ok || g != (GoAwayFacts{LastStreamID: 1, Code: http2.ErrCodeProtocol, Count: 2}) {
			t.Fatalf("chunk %d: goaway %+v %v", size, g, ok)
		}
		if w.BytesWritten() != int64(len(out)) || w.BytesRead() != int64(len(in)) {
			t.Fatalf("chunk %d: counts %d %d", size, w.BytesWritten(), w.BytesRead())
		}
		if w.out.inFrame || w.out.hdrN != 0 || w.in.inFrame || w.in.hdrN != 0 {
			t.Fatalf("chunk %d: scanner not at a frame boundary", size)
		}
	}
}

func TestClaimTakesEachOpenedStreamOnce(t *testing.T) {
	w := &Wire{streams: make(map[uint32]*StreamFacts)}
	w.out.preface = len(http2.ClientPreface)
	if c := w.claim(); c != (Claim{}) {
		t.Fatalf("claim before anything: %+v", c)
	}
	w.sawWrite(frames(t, true, func(fr *http2.Framer) error { return fr.WriteSettings() }))
	if c := w.claim(); c != (Claim{}) {
		t.Fatalf("claim after the preface: %+v", c)
	}
	headers := func(id uint32, end bool) []byte {
		return frames(t, false, func(fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte("x"), EndHeaders: true, EndStream: end})
		})
	}
	w.sawWrite(headers(1, false))
	if c := w.claim(); c != (Claim{Stream: 1, Wrote: true}) {
		t.Fatalf("first claim: %+v", c)
	}
	// A request whose HEADERS x/net skipped (after a write error) finds
	// nothing new.
	if c := w.claim(); c != (Claim{}) {
		t.Fatalf("second claim with nothing written: %+v", c)
	}
	// Trailers on stream 1 open nothing.
	w.sawWrite(headers(1, true))
	if c := w.claim(); c != (Claim{}) {
		t.Fatalf("claim after trailers: %+v", c)
	}
	w.sawWrite(headers(3, true))
	if c := w.claim(); c != (Claim{Stream: 3, Wrote: true}) {
		t.Fatalf("third claim: %+v", c)
	}
	// A write cut off inside a frame header: bytes of an unknown frame
	// reached the socket. The first claim after it says so, once.
	w.sawWrite(headers(5, true)[:4])
	if c := w.claim(); c != (Claim{Wrote: true}) {
		t.Fatalf("claim after a cut header: %+v", c)
	}
	if c := w.claim(); c != (Claim{}) {
		t.Fatalf("second claim after a cut header: %+v", c)
	}
}

func TestWireForgetsOldestBeyondItsBound(t *testing.T) {
	w := &Wire{streams: make(map[uint32]*StreamFacts)}
	for i := range maxTracked + 1 {
		id := uint32(2*i + 1)
		w.sawWrite(frames(t, false, func(fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: true})
		}))
	}
	if _, ok := w.Stream(1); ok {
		t.Error("stream 1 still tracked beyond the bound")
	}
	if _, ok := w.Stream(3); !ok {
		t.Error("stream 3 forgotten too early")
	}
	if len(w.streams) != maxTracked {
		t.Errorf("%d streams tracked", len(w.streams))
	}
	w.Forget(3)
	if _, ok := w.Stream(3); ok {
		t.Error("Forget did not forget")
	}
}

// TestResponseBeforeTheWriteReturns covers the race where the server's
// answer is read while the client's Write of the HEADERS has not yet
// returned: the read must still be attributed to the stream.
func TestResponseBeforeTheWriteReturns(t *testing.T) {
	w := &Wire{streams: make(map[uint32]*StreamFacts)}
	hdrs := frames(t, false, func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("req"), EndHeaders: true, EndStream: true})
	})
	answer := frames(t, false, func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("resp")})
	})
	w.willWrite(hdrs)
	w.sawRead(answer) // the read loop gets there first
	if s, ok := w.Stream(1); !ok || !s.ResponseStarted || s.HeadersWritten {
		t.Fatalf("before the write returned: %+v %v", s, ok)
	}
	if c := w.claim(); c != (Claim{}) {
		t.Fatalf("claim before any byte was accepted: %+v", c)
	}
	w.sawWrite(hdrs)
	if s, _ := w.Stream(1); !s.ResponseStarted || !s.HeadersWritten || !s.EndStreamWritten {
		t.Fatalf("after the write: %+v", s)
	}
	if c := w.claim(); c != (Claim{Stream: 1, Wrote: true}) {
		t.Fatalf("claim: %+v", c)
	}
	// The probe left the real scanner alone.
	if w.out.inFrame || w.out.hdrN != 0 {
		t.Fatal("scanner moved by willWrite")
	}
}

// TestDoneBeforeTheHeadersHook covers the race where a fast server's whole
// response is read, and the exchange ended, before x/net's write goroutine
// reports the HEADERS written: the late claim must still let the Wire
// forget the stream. Before, one stream in about sixty stayed tracked on
// a loopback benchmark until maxTracked records filled the Wire, and each
// new stream then scanned them all.
func TestDoneBeforeTheHeadersHook(t *testing.T) {
	w := &Wire{streams: make(map[uint32]*StreamFacts)}
	var emitted []fsm.EventKind
	for i := range 3 * maxTracked {
		id := uint32(2*i + 1)
		a := w.NewAttempt()
		trace := a.Trace(EmitFunc(func(e fsm.Event) { emitted = append(emitted, e.Kind) }))
		w.sawWrite(frames(t, false, func(fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: true})
		}))
		if i%2 == 0 {
			a.Done()
			trace.WroteHeaders() // the hook, after the exchange ended
		} else {
			trace.WroteHeaders()
			a.Done()
		}
		if c := a.Claim(); c != (Claim{Stream: id, Wrote: true}) {
			t.Fatalf("stream %d: claim %+v", id, c)
		}
		if _, ok := w.Stream(id); ok {
			t.Fatalf("stream %d still tracked after Done and its claim (%d tracked)", id, len(w.streams))
		}
	}
	if len(w.streams) != 0 {
		t.Errorf("%d streams tracked at the end", len(w.streams))
	}
	if len(emitted) != 3*maxTracked {
		t.Errorf("%d FirstByteWritten events for %d claims", len(emitted), 3*maxTracked)
	}
}

// scriptedConn returns one chunk per Read, then io.EOF; seen records
// what the Wire said of settlement as each Read began.
type scriptedConn struct {
	net.Conn
	chunks [][]byte
	w      *Wire
	seen   []bool
}

func (c *scriptedConn) Read(p []byte) (int, error) {
	c.seen = append(c.seen, c.w.Settled())
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks = c.chunks[1:]
	return n, nil
}

// TestWireSettlesOnTheReadAfterSettings: the Wire says x/net settled
// only once a Read starts after the one that ended the server's first
// SETTINGS frame (x/net handles every frame of a Read's bytes before it
// reads again), not for a SETTINGS acknowledgement, and says closed once
// a Read fails.
func TestWireSettlesOnTheReadAfterSettings(t *testing.T) {
	ack := frames(t, false, func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
	settings := frames(t, false, func(fr *http2.Framer) error {
		return fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1})
	})
	sc := &scriptedConn{chunks: [][]byte{ack, settings[:5], settings[5:], ack}}
	oc, w := Observe(sc)
	sc.w = w
	buf := make([]byte, 64)
	for i := 0; ; i++ {
		if _, err := oc.Read(buf); err != nil {
			break
		}
		if w.Closed() {
			t.Fatalf("closed after read %d", i+1)
		}
	}
	// Reads 1–3 began before the SETTINGS frame ended; read 4 and the
	// failing read 5 began after.
	if want := []bool{false, false, false, true, true}; !slices.Equal(sc.seen, want) {
		t.Errorf("settled as each read began: %v, want %v", sc.seen, want)
	}
	if !w.Closed() {
		t.Error("not closed after a failed Read")
	}
}
