package h2

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// Every bound on what the server can make grow, hit once.

func TestBoundMaxHeaderBlockFrames(t *testing.T) {
	h := settled(t, Config{})
	st := h.get("/")
	h.sent()
	h.sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: h.block(":status", "200")})
	for range h.m.cfg.maxBlockFrames {
		h.sfr.WriteContinuation(st.id, false, nil) // empty: x/net's byte bound never trips
	}
	h.pump()
	if code := h.connErr(); code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("code %v", code)
	}
}

func TestBoundHeaderBlockBytes(t *testing.T) {
	h := settled(t, Config{MaxHeaderListSize: 1 << 10})
	st := h.get("/")
	h.sent()
	h.sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: h.block(":status", "200")})
	chunk := make([]byte, 1000) // literal bytes the decoder buffers
	for range 3 {
		h.sfr.WriteContinuation(st.id, false, chunk)
	}
	h.pump()
	if code := h.connErr(); code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("code %v (%v)", code, h.m.err)
	}
}

func TestBoundMaxHeaderListSize(t *testing.T) {
	h := settled(t, Config{MaxHeaderListSize: 1 << 10})
	big := h.get("/big")
	h.sent()
	h.headers(big.id, true, ":status", "200", "x-big", strings.Repeat("v", 1000))
	h.pump()
	var se *StreamError
	if !errors.As(big.err, &se) || se.Code != http2.ErrCodeEnhanceYourCalm || !errors.Is(big.err, ErrHeaderListTooLarge) {
		t.Fatalf("err %v", big.err)
	}
	// Interim responses count toward the same bound.
	sum := h.get("/sum")
	h.sent()
	for range 3 {
		h.headers(sum.id, false, ":status", "103", "link", strings.Repeat("l", 250))
	}
	h.headers(sum.id, true, ":status", "200", "x-last", strings.Repeat("v", 250))
	h.pump()
	if !errors.Is(sum.err, ErrHeaderListTooLarge) {
		t.Fatalf("1xx + final: err %v", sum.err)
	}
	if h.m.closed {
		t.Fatalf("connection ended: %v", h.m.err)
	}
}

func TestBoundMaxInformational(t *testing.T) {
	h := settled(t, Config{MaxInformational: 3})
	rec := &recorder{}
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	st := h.open(req, rec)
	h.sent()
	for range 4 {
		h.headers(st.id, false, ":status", "100")
	}
	h.pump()
	var se *StreamError
	if !errors.As(st.err, &se) || se.Code != http2.ErrCodeEnhanceYourCalm || !errors.Is(st.err, ErrTooManyInformational) {
		t.Fatalf("err %v", st.err)
	}
	if got := strings.Count(rec.events(), "1xx-100"); got != 3 {
		t.Fatalf("%d interim responses delivered: %s", got, rec.events())
	}
	if def := (Config{}).normalize().max1xx; def != DefaultMaxInformational {
		t.Fatalf("default %d", def)
	}
}

func TestInformationalHookAborts(t *testing.T) {
	h := settled(t, Config{})
	stop := errors.New("enough")
	rec := &recorder{on1xx: func(int) error { return stop }}
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	st := h.open(req, rec)
	h.sent()
	h.headers(st.id, false, ":status", "103", "link", "</a>")
	h.pump()
	var se *StreamError
	if !errors.As(st.err, &se) || se.Code != http2.ErrCodeCancel || !errors.Is(st.err, stop) {
		t.Fatalf("err %v", st.err)
	}
	if rec.infoSizes[0] != len(":status")+3+32+len("link")+4+32 {
		t.Fatalf("size %d", rec.infoSizes[0])
	}
}

// The server can make us owe it acknowledgements only while our writes
// drain: a PING or SETTINGS flood against a stalled writer ends the
// connection.
func TestBoundMaxQueuedControlFrames(t *testing.T) {
	for _, kind := range []string{"PING", "SETTINGS"} {
		h := settled(t, Config{MaxQueuedControlFrames: 100})
		for range 101 {
			if kind == "PING" {
				h.sfr.WritePing(false, [8]byte{1})
			} else {
				h.sfr.WriteSettings()
			}
		}
		h.pump() // nothing is taken by a writer meanwhile
		if code := h.connErr(); code != http2.ErrCodeEnhanceYourCalm {
			t.Fatalf("%s flood: code %v", kind, code)
		}
	}
	// A writer that drains keeps the connection going.
	h := settled(t, Config{MaxQueuedControlFrames: 100})
	for range 10 {
		for range 50 {
			h.sfr.WritePing(false, [8]byte{1})
		}
		h.pump()
		h.sent()
	}
	if h.m.closed {
		t.Fatalf("draining writer: %v", h.m.err)
	}
	if def := (Config{}).normalize().maxControl; def != DefaultMaxQueuedControlFrames {
		t.Fatalf("default %d", def)
	}
}

// A WINDOW_UPDATE or RST_STREAM flood on closed streams holds no memory.
func TestBoundFloodsOnClosedStreams(t *testing.T) {
	h := settled(t, Config{})
	st := h.get("/")
	h.sent()
	h.respond(st.id, "x")
	for range 10000 {
		h.sfr.WriteWindowUpdate(st.id, 1)
		h.sfr.WriteRSTStream(st.id, http2.ErrCodeCancel)
	}
	h.pump()
	if h.m.closed || len(h.m.streams) != 0 || len(h.m.out.buf) != 0 {
		t.Fatalf("closed %v (%v), %d streams, %d bytes queued", h.m.closed, h.m.err, len(h.m.streams), len(h.m.out.buf))
	}
}

// A request body waits while the queue for the writer holds
// uploadQueueBytes: back-pressure.
func TestBoundUploadQueue(t *testing.T) {
	h := settled(t, Config{}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: maxWindow})
	h.sfr.WriteWindowUpdate(0, maxWindow-initialWindow)
	h.pump()
	h.sent()
	st := h.post("/", 1<<20)
	body := make([]byte, 1<<20)
	n, wait, err := h.m.sendBody(h.now, st, body, true)
	if err != nil || !wait || n < uploadQueueBytes || n >= uploadQueueBytes+int(h.m.peerMaxFrame) {
		t.Fatalf("queued %d, wait %v, %v", n, wait, err)
	}
	if n2, _, _ := h.m.sendBody(h.now, st, body[n:], true); n2 != 0 {
		t.Fatalf("queued %d more while the queue is full", n2)
	}
	h.sent()
	if n3, _, _ := h.m.sendBody(h.now, st, body[n:], true); n3 == 0 {
		t.Fatal("nothing queued once the writer drained")
	}
}

// The request header list is bounded by the server's
// SETTINGS_MAX_HEADER_LIST_SIZE and by ours.
func TestBoundRequestHeaderList(t *testing.T) {
	h := settled(t, Config{}, http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: 200})
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 200))
	head, _ := prepareRequest(req, false)
	h.m.reserve()
	_, err := h.m.start(h.now, &stream{req: req, head: head})
	var re *RequestError
	if !errors.As(err, &re) || errors.Is(err, ErrUnsent) {
		t.Fatalf("err %v", err)
	}
	if h.m.reserved != 0 {
		t.Fatalf("reservation kept: %d", h.m.reserved)
	}
	own := settled(t, Config{MaxHeaderListSize: 100})
	own.m.reserve()
	if _, err := own.m.start(own.now, &stream{req: req, head: head}); !errors.As(err, &re) {
		t.Fatalf("own bound: %v", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	c := (Config{}).normalize()
	if c.maxHeaderList != DefaultMaxHeaderListSize || c.maxStreams != DefaultMaxConcurrentStreams ||
		c.streamWindow != DefaultStreamWindow || c.connWindow != DefaultConnWindow ||
		c.maxReadFrame != DefaultMaxReadFrameSize || c.pingAfter != DefaultPingAfter ||
		c.pingTimeout != DefaultPingTimeout || c.settingsTimeout != DefaultSettingsTimeout ||
		!c.compression || c.maxBlockFrames != 1281 {
		t.Fatalf("%+v", c)
	}
	c = (Config{StreamWindow: 10, ConnWindow: 10, MaxReadFrameSize: 1 << 30, PingAfter: -1, SettingsTimeout: -1}).normalize()
	if c.streamWindow != MinWindow || c.connWindow != MinWindow || c.maxReadFrame != maxMaxFrameSize ||
		c.pingAfter != 0 || c.pingTimeout != 0 || c.settingsTimeout != 0 {
		t.Fatalf("%+v", c)
	}
}
