package h2

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rstSent returns the code of the RST_STREAM the machine sent for id.
func (h *harness) rstSent(id uint32) (http2.ErrCode, bool) {
	for _, f := range h.sent() {
		if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == id {
			return r.ErrCode, true
		}
	}
	return 0, false
}

// Closing a response body before its end resets the stream with CANCEL
// and returns its unread bytes to the connection window.
func TestCloseBodyEarlyResets(t *testing.T) {
	h := settled(t, Config{})
	st := h.get("/")
	h.sent()
	h.headers(st.id, false, ":status", "200")
	h.sfr.WriteData(st.id, false, make([]byte, 1000))
	h.pump()
	h.m.closeBody(h.now, st)
	if code, ok := h.rstSent(st.id); !ok || code != http2.ErrCodeCancel {
		t.Fatalf("RST_STREAM %v %v", code, ok)
	}
	if h.m.connUnacked+h.m.recvWindow != h.m.cfg.connWindow || st.buf.n != 0 || len(h.m.streams) != 0 {
		t.Fatalf("window %d unacked %d buffered %d streams %d", h.m.recvWindow, h.m.connUnacked, st.buf.n, len(h.m.streams))
	}
	if _, err, _ := h.m.readBody(st, make([]byte, 1)); !errors.Is(err, ErrBodyClosed) {
		t.Fatalf("read after close: %v", err)
	}
}

// A cancelled context resets the stream with CANCEL; a body read to its
// end does not.
func TestCancelResets(t *testing.T) {
	h := settled(t, Config{})
	st := h.get("/")
	h.sent()
	h.m.cancel(h.now, st, context.Canceled)
	if code, ok := h.rstSent(st.id); !ok || code != http2.ErrCodeCancel || !errors.Is(st.err, context.Canceled) {
		t.Fatalf("RST_STREAM %v %v, err %v", code, ok, st.err)
	}
	done := h.get("/done")
	h.sent()
	h.respond(done.id, "all")
	h.pump()
	buf := make([]byte, 10)
	if n, _, _ := h.m.readBody(done, buf); n != 3 {
		t.Fatalf("read %d", n)
	}
	if _, err, _ := h.m.readBody(done, buf); err != io.EOF {
		t.Fatalf("err %v", err)
	}
	h.m.closeBody(h.now, done)
	if _, ok := h.rstSent(done.id); ok {
		t.Fatal("RST_STREAM after a complete response")
	}
}

// An embedder whose Framer decodes header blocks (ReadMetaHeaders) feeds
// MetaHeadersFrame: the same checks and the same outcome.
func TestMetaHeadersFrameInput(t *testing.T) {
	h := settled(t, Config{})
	ok, bad := h.get("/ok"), h.get("/bad")
	h.sent()
	var wire bytes.Buffer
	sfr := http2.NewFramer(&wire, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	block := func(kv ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(kv); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: ok.id, BlockFragment: block(":status", "200", "x-a", "1"), EndStream: true, EndHeaders: true})
	sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: bad.id, BlockFragment: block(":status", "200", "connection", "close"), EndStream: true, EndHeaders: true})
	fr := http2.NewFramer(nil, &wire)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for wire.Len() > 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		h.m.frame(h.now, f)
	}
	var se *StreamError
	if ok.err != nil || ok.phase != respDone || ok.header.Get("X-A") != "1" || !errors.As(bad.err, &se) || se.Code != http2.ErrCodeProtocol {
		t.Fatalf("ok: %v %v; bad: %v", ok.err, ok.header, bad.err)
	}
}
