package h2

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// The client-side MUSTs of RFC 9113 (and RFC 8441, RFC 7541), one case
// each, driven on the machine without sockets. A case names its section.

// TestRFCConnectionErrors: what the server does that the client MUST
// treat as a connection error (§5.4.1): GOAWAY with the code, every
// stream failed.
func TestRFCConnectionErrors(t *testing.T) {
	small := Config{StreamWindow: MinWindow, ConnWindow: MinWindow}
	cases := []struct {
		name   string
		code   http2.ErrCode
		fresh  bool // do not settle the connection first
		script func(h *harness)
		cfg    Config
	}{
		{"3.4 first frame not SETTINGS", http2.ErrCodeProtocol, true, func(h *harness) {
			h.sfr.WritePing(false, [8]byte{})
		}, Config{}},
		{"3.4 first frame a SETTINGS ACK", http2.ErrCodeProtocol, true, func(h *harness) {
			h.sfr.WriteSettingsAck()
		}, Config{}},
		{"4.2 frame larger than SETTINGS_MAX_FRAME_SIZE", http2.ErrCodeFrameSize, false, func(h *harness) {
			h.sfr.WriteData(1, false, make([]byte, DefaultMaxReadFrameSize+1))
		}, Config{}},
		{"4.2 padded DATA too short for its pad length", http2.ErrCodeFrameSize, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameData, http2.FlagDataPadded, 1, nil)
		}, Config{}},
		{"4.2 HEADERS with PRIORITY too short for it", http2.ErrCodeFrameSize, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersPriority|http2.FlagHeadersEndHeaders, 1, []byte{0, 0})
		}, Config{}},
		{"4.3 HPACK decoding error", http2.ErrCodeCompression, false, func(h *harness) {
			h.sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		}, Config{}},
		{"4.3 truncated header block", http2.ErrCodeCompression, false, func(h *harness) {
			b := h.block(":status", "200", "x-long", strings.Repeat("v", 100))
			h.sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:len(b)-10], EndHeaders: true})
		}, Config{}},
		{"4.3 dynamic table size update above our SETTINGS_HEADER_TABLE_SIZE", http2.ErrCodeCompression, false, func(h *harness) {
			h.sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x3f, 0xe1, 0x7f}, EndHeaders: true}) // size update 16384
		}, Config{}},
		{"5.1 DATA on an idle stream", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteData(5, false, []byte("x"))
		}, Config{}},
		{"5.1 HEADERS on an idle client stream", http2.ErrCodeProtocol, false, func(h *harness) {
			h.headers(7, true, ":status", "200")
		}, Config{}},
		{"5.1.1 HEADERS on a server-initiated stream (push disabled)", http2.ErrCodeProtocol, false, func(h *harness) {
			h.headers(2, true, ":status", "200")
		}, Config{}},
		{"5.1 DATA after END_STREAM (half-closed remote)", http2.ErrCodeStreamClosed, false, func(h *harness) {
			h.headers(3, false, ":status", "200")
			h.sfr.WriteData(3, true, nil)
			h.sfr.WriteData(3, false, []byte("late"))
		}, Config{}},
		{"5.1 HEADERS after END_STREAM (half-closed remote)", http2.ErrCodeStreamClosed, false, func(h *harness) {
			h.headers(3, true, ":status", "200")
			h.headers(3, true, "x-late", "1")
		}, Config{}},
		{"6.1 DATA on stream 0", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameData, 0, 0, []byte("x"))
		}, Config{}},
		{"6.1 DATA padding longer than the payload", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameData, http2.FlagDataPadded, 1, []byte{5, 'a'})
		}, Config{}},
		{"6.2 HEADERS on stream 0", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 0, h.block(":status", "200"))
		}, Config{}},
		{"6.2 HEADERS padding longer than the payload", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersPadded, 1, []byte{9, 0x88})
		}, Config{}},
		{"6.4 RST_STREAM on stream 0", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameRSTStream, 0, 0, []byte{0, 0, 0, 8})
		}, Config{}},
		{"6.4 RST_STREAM of the wrong length", http2.ErrCodeFrameSize, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameRSTStream, 0, 1, []byte{0, 0, 8})
		}, Config{}},
		{"6.4 RST_STREAM on an idle stream", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteRSTStream(9, http2.ErrCodeCancel)
		}, Config{}},
		{"6.5 SETTINGS on a stream", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameSettings, 0, 1, nil)
		}, Config{}},
		{"6.5 SETTINGS length not a multiple of 6", http2.ErrCodeFrameSize, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameSettings, 0, 0, []byte{0, 1, 0, 0, 0})
		}, Config{}},
		{"6.5 SETTINGS ACK with a payload", http2.ErrCodeFrameSize, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameSettings, http2.FlagSettingsAck, 0, []byte{0, 1, 0, 0, 0, 0})
		}, Config{}},
		{"6.5.2 SETTINGS_ENABLE_PUSH = 1 from a server", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 1})
		}, Config{}},
		{"6.5.2 SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1", http2.ErrCodeFlowControl, false, func(h *harness) {
			h.sfr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
		}, Config{}},
		{"6.5.2 SETTINGS_MAX_FRAME_SIZE below 2^14", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1<<14 - 1})
		}, Config{}},
		{"6.5.2 SETTINGS_MAX_FRAME_SIZE above 2^24-1", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 24})
		}, Config{}},
		{"RFC 8441 3 SETTINGS_ENABLE_CONNECT_PROTOCOL above 1", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteSettings(http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 2})
		}, Config{}},
		{"RFC 8441 3 SETTINGS_ENABLE_CONNECT_PROTOCOL withdrawn", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteSettings(http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1})
			h.sfr.WriteSettings(http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 0})
		}, Config{}},
		{"6.6 PUSH_PROMISE with push disabled", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: h.block(":method", "GET"), EndHeaders: true})
		}, Config{}},
		{"6.7 PING on a stream", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FramePing, 0, 1, make([]byte, 8))
		}, Config{}},
		{"6.7 PING of the wrong length", http2.ErrCodeFrameSize, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FramePing, 0, 0, make([]byte, 7))
		}, Config{}},
		{"6.8 GOAWAY on a stream", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameGoAway, 0, 1, make([]byte, 8))
		}, Config{}},
		{"6.9 WINDOW_UPDATE of 0 on the connection", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameWindowUpdate, 0, 0, []byte{0, 0, 0, 0})
		}, Config{}},
		{"6.9 WINDOW_UPDATE of the wrong length", http2.ErrCodeFrameSize, false, func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameWindowUpdate, 0, 0, []byte{0, 0, 1})
		}, Config{}},
		{"6.9 WINDOW_UPDATE on an idle stream", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteWindowUpdate(11, 1)
		}, Config{}},
		{"6.9.1 connection window above 2^31-1", http2.ErrCodeFlowControl, false, func(h *harness) {
			h.sfr.WriteWindowUpdate(0, maxWindow)
		}, Config{}},
		{"6.9.1 DATA beyond the connection window", http2.ErrCodeFlowControl, false, func(h *harness) {
			h.headers(3, false, ":status", "200")
			for range 5 { // 5 x 16 KiB > 65535
				h.sfr.WriteData(3, false, make([]byte, 1<<14))
			}
		}, small},
		{"6.9.2 SETTINGS_INITIAL_WINDOW_SIZE overflowing an open stream's window", http2.ErrCodeFlowControl, false, func(h *harness) {
			h.sfr.WriteWindowUpdate(3, maxWindow-initialWindow)
			h.sfr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: initialWindow + 1})
		}, Config{}},
		{"6.10 CONTINUATION without a header block", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteContinuation(1, true, h.block("x", "y"))
		}, Config{}},
		{"6.10 header block interrupted by another frame", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.block(":status", "200")})
			h.sfr.WritePing(false, [8]byte{})
		}, Config{}},
		{"6.10 CONTINUATION on another stream", http2.ErrCodeProtocol, false, func(h *harness) {
			h.sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.block(":status", "200")})
			h.sfr.WriteContinuation(3, true, nil)
		}, Config{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h *harness
			if c.fresh {
				h = newHarness(t, c.cfg)
				h.sent()
			} else {
				h = settled(t, c.cfg)
			}
			st1 := h.get("/1")
			st3 := h.connect() // stream 3 stays open on our side
			h.sent()
			c.script(h)
			h.pump()
			if got := h.connErr(); got != c.code {
				t.Fatalf("connection error %v (%v), want %v", got, h.m.err, c.code)
			}
			g, ok := h.goAwaySent()
			if !ok || g.ErrCode != c.code || g.LastStreamID != 0 {
				t.Fatalf("GOAWAY sent = %+v, %v; want code %v, last stream 0 (§5.4.1)", g, ok, c.code)
			}
			for _, st := range []*stream{st1, st3} {
				var ce *ConnectionError
				if st.err == nil || (!errors.As(st.err, &ce) && !errors.Is(st.err, ErrUnsent)) {
					t.Fatalf("stream %d error = %v", st.id, st.err)
				}
			}
			if h.m.reserve() {
				t.Fatal("Reserve succeeded on an ended connection")
			}
		})
	}
}

// TestRFCStreamErrors: what the client MUST treat as a stream error
// (§5.4.2) or a malformed response (§8.1.1): RST_STREAM with the code,
// the stream failed with a local *StreamError, the connection goes on.
func TestRFCStreamErrors(t *testing.T) {
	type tc struct {
		name   string
		code   http2.ErrCode
		method string
		script func(h *harness)
		cfg    Config
	}
	malformed := func(name string, kv ...string) tc {
		return tc{name, http2.ErrCodeProtocol, "GET", func(h *harness) { h.headers(1, true, kv...) }, Config{}}
	}
	cases := []tc{
		{"6.9 WINDOW_UPDATE of 0 on a stream", http2.ErrCodeProtocol, "GET", func(h *harness) {
			h.sfr.WriteRawFrame(http2.FrameWindowUpdate, 0, 1, []byte{0, 0, 0, 0})
		}, Config{}},
		{"6.9.1 stream window above 2^31-1", http2.ErrCodeFlowControl, "GET", func(h *harness) {
			h.sfr.WriteWindowUpdate(1, maxWindow)
		}, Config{}},
		{"6.9.1 DATA beyond the stream window", http2.ErrCodeFlowControl, "GET", func(h *harness) {
			h.headers(1, false, ":status", "200")
			for range 5 {
				h.sfr.WriteData(1, false, make([]byte, 1<<14))
			}
		}, Config{StreamWindow: MinWindow}},
		{"8.1 DATA before the response header section", http2.ErrCodeProtocol, "GET", func(h *harness) {
			h.sfr.WriteData(1, true, []byte("x"))
		}, Config{}},
		{"8.1 interim response with END_STREAM", http2.ErrCodeProtocol, "GET", func(h *harness) {
			h.headers(1, true, ":status", "103")
		}, Config{}},
		{"8.1 trailers without END_STREAM", http2.ErrCodeProtocol, "GET", func(h *harness) {
			h.headers(1, false, ":status", "200")
			h.headers(1, false, "x-trailer", "1")
		}, Config{}},
		{"8.1 pseudo-header field in trailers", http2.ErrCodeProtocol, "GET", func(h *harness) {
			h.headers(1, false, ":status", "200")
			h.headers(1, true, ":status", "200")
		}, Config{}},
		{"8.1.1 fewer DATA bytes than content-length", http2.ErrCodeProtocol, "GET", func(h *harness) {
			h.headers(1, false, ":status", "200", "content-length", "10")
			h.sfr.WriteData(1, true, []byte("short"))
		}, Config{}},
		{"8.1.1 more DATA bytes than content-length", http2.ErrCodeProtocol, "GET", func(h *harness) {
			h.headers(1, false, ":status", "200", "content-length", "2")
			h.sfr.WriteData(1, false, []byte("long"))
		}, Config{}},
		malformed("8.1.1 invalid content-length", ":status", "200", "content-length", "-1"),
		malformed("8.1.1 differing content-length values", ":status", "200", "content-length", "1", "content-length", "2"),
		{"8.1.1 DATA in a response to HEAD", http2.ErrCodeProtocol, "HEAD", func(h *harness) {
			h.headers(1, false, ":status", "200", "content-length", "4")
			h.sfr.WriteData(1, true, []byte("body"))
		}, Config{}},
		malformed("8.2.1 upper-case field name", ":status", "200", "X-Upper", "1"),
		malformed("8.2.1 field value with a line feed", ":status", "200", "x-v", "a\nb"),
		malformed("8.2.1 field value with NUL", ":status", "200", "x-v", "a\x00b"),
		malformed("8.2.2 connection-specific field", ":status", "200", "connection", "close"),
		malformed("8.2.2 transfer-encoding", ":status", "200", "transfer-encoding", "chunked"),
		malformed("8.3 pseudo-header after a regular field", "x-a", "1", ":status", "200"),
		malformed("8.3 request pseudo-header in a response", ":status", "200", ":method", "GET"),
		malformed("8.3 unknown pseudo-header", ":status", "200", ":foo", "1"),
		malformed("8.3.2 missing :status", "x-a", "1"),
		malformed("8.3.2 invalid :status", ":status", "2000"),
		malformed("8.3.2 duplicate :status", ":status", "200", ":status", "204"),
		malformed("8.6 101 Switching Protocols", ":status", "101"),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := settled(t, c.cfg)
			req, _ := http.NewRequest(c.method, "https://example.com/", nil)
			st := h.open(req, nil)
			h.sent()
			c.script(h)
			h.pump()
			if h.m.closed {
				t.Fatalf("connection ended: %v", h.m.err)
			}
			var se *StreamError
			if !errors.As(st.err, &se) || se.Code != c.code || se.Remote || se.StreamID != 1 {
				t.Fatalf("stream error = %v, want a local *StreamError %v on stream 1", st.err, c.code)
			}
			var rst *http2.RSTStreamFrame
			for _, f := range h.sent() {
				if r, ok := f.(*http2.RSTStreamFrame); ok {
					rst = r
				}
			}
			if rst == nil || rst.StreamID != 1 || rst.ErrCode != c.code {
				t.Fatalf("RST_STREAM sent = %+v, want stream 1 %v", rst, c.code)
			}
			// The connection still carries streams.
			st2 := h.get("/next")
			h.sent()
			h.respond(st2.id, "ok")
			h.pump()
			if st2.err != nil || st2.phase != respDone || st2.buf.n != 2 {
				t.Fatalf("next stream: err %v phase %v buffered %d", st2.err, st2.phase, st2.buf.n)
			}
		})
	}
}

// TestRFCIgnored: frames and values the client MUST ignore: the
// connection and the stream go on, nothing is sent back but what the
// frame asks for.
func TestRFCIgnored(t *testing.T) {
	cases := []struct {
		name   string
		script func(h *harness, st *stream)
	}{
		{"4.1 unknown frame type, also on an idle stream (5.5)", func(h *harness, st *stream) {
			h.sfr.WriteRawFrame(0xfa, 0xff, 0, []byte("ext"))
			h.sfr.WriteRawFrame(0xfa, 0, 99, []byte("ext"))
		}},
		{"4.1 unknown flags on a known frame", func(h *harness, st *stream) {
			h.sfr.WriteRawFrame(http2.FramePing, 0xf0, 0, make([]byte, 8))
		}},
		{"5.5 unknown SETTINGS parameter", func(h *harness, st *stream) {
			h.sfr.WriteSettings(http2.Setting{ID: 0x7777, Val: 42})
		}},
		{"6.3 PRIORITY, also on an idle stream", func(h *harness, st *stream) {
			h.sfr.WritePriority(1, http2.PriorityParam{Weight: 9})
			h.sfr.WritePriority(21, http2.PriorityParam{Weight: 9})
		}},
		{"6.3 PRIORITY of the wrong length on an idle stream", func(h *harness, st *stream) {
			h.sfr.WriteRawFrame(http2.FramePriority, 0, 41, []byte{1})
		}},
		{"6.5.3 unsolicited SETTINGS ACK", func(h *harness, st *stream) {
			h.sfr.WriteSettingsAck()
			h.sfr.WriteSettingsAck()
		}},
		{"6.7 PING ACK that matches no PING", func(h *harness, st *stream) {
			h.sfr.WritePing(true, [8]byte{9})
		}},
		{"6.9 WINDOW_UPDATE on a closed stream", func(h *harness, st *stream) {
			h.sfr.WriteWindowUpdate(st.id-2, 10)
		}},
		{"6.4 RST_STREAM on a closed stream", func(h *harness, st *stream) {
			h.sfr.WriteRSTStream(st.id-2, http2.ErrCodeCancel)
		}},
		{"5.1 DATA and HEADERS on a stream we reset", func(h *harness, st *stream) {
			h.headers(st.id-2, false, ":status", "200", "x-dynamic", "indexed")
			h.sfr.WriteData(st.id-2, true, []byte("late"))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := settled(t, Config{})
			old := h.get("/old") // stream 1: reset by us, then closed
			h.sent()
			h.m.cancel(h.now, old, errors.New("caller gave up"))
			st := h.get("/live") // stream 3
			h.sent()
			c.script(h, st)
			h.respond(st.id, "fine")
			h.pump()
			if h.m.closed {
				t.Fatalf("connection ended: %v", h.m.err)
			}
			if st.err != nil || st.phase != respDone || st.buf.n != 4 {
				t.Fatalf("stream: err %v phase %v buffered %d", st.err, st.phase, st.buf.n)
			}
			for _, f := range h.sent() {
				switch f := f.(type) {
				case *http2.RSTStreamFrame, *http2.GoAwayFrame:
					t.Fatalf("sent %v", f)
				case *http2.PingFrame:
					if !f.IsAck() {
						t.Fatalf("sent a PING")
					}
				}
			}
		})
	}
}

// §6.7: a PING is answered with an ACK carrying the same payload; an
// ACK is not answered.
func TestRFC_6_7_PingAnswered(t *testing.T) {
	h := settled(t, Config{})
	h.sfr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
	h.sfr.WritePing(true, [8]byte{9})
	h.pump()
	var pings []*http2.PingFrame
	for _, f := range h.sent() {
		if p, ok := f.(*http2.PingFrame); ok {
			pings = append(pings, p)
		}
	}
	if len(pings) != 1 || !pings[0].IsAck() || pings[0].Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Fatalf("sent %+v", pings)
	}
}

// §3.4, §6.5.3: the client preface is the magic then SETTINGS (push
// disabled, our windows, frame and header list sizes), and the server's
// SETTINGS are acknowledged.
func TestRFC_3_4_PrefaceAndSettingsAck(t *testing.T) {
	h := newHarness(t, Config{MaxHeaderListSize: 1 << 20, StreamWindow: 1 << 20, ConnWindow: 1 << 22})
	first := h.sent()
	sf, ok := first[0].(*sentSettings)
	if !ok || sf.Ack {
		t.Fatalf("first frame %v", first[0])
	}
	want := map[http2.SettingID]uint32{
		http2.SettingEnablePush:        0,
		http2.SettingInitialWindowSize: 1 << 20,
		http2.SettingMaxFrameSize:      DefaultMaxReadFrameSize,
		http2.SettingMaxHeaderListSize: 1 << 20,
	}
	for id, v := range want {
		if got, ok := sf.Values[id]; !ok || got != v {
			t.Errorf("setting %v = %d, %v; want %d", id, got, ok, v)
		}
	}
	wu, ok := first[1].(*http2.WindowUpdateFrame)
	if !ok || wu.StreamID != 0 || wu.Increment != 1<<22-initialWindow {
		t.Fatalf("second frame %v", first[1])
	}
	h.sfr.WriteSettings()
	h.pump()
	acked := false
	for _, f := range h.sent() {
		if s, ok := f.(*sentSettings); ok && s.Ack {
			acked = true
		}
	}
	if !acked || !h.m.settled {
		t.Fatalf("SETTINGS not acknowledged (settled %v)", h.m.settled)
	}
}

// §5.1.2: the client does not open more streams than the server's
// SETTINGS_MAX_CONCURRENT_STREAMS, nor than our own cap; a stream that
// ends frees its slot.
func TestRFC_5_1_2_MaxConcurrentStreams(t *testing.T) {
	h := settled(t, Config{}, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 2})
	a, b := h.get("/a"), h.get("/b")
	if h.m.reserve() {
		t.Fatal("third reservation with MAX_CONCURRENT_STREAMS 2")
	}
	h.sent()
	h.respond(a.id, "")
	h.pump()
	if !h.m.reserve() {
		t.Fatal("no slot after a stream ended")
	}
	h.m.unreserve(h.now)
	_ = b

	own := settled(t, Config{MaxConcurrentStreams: 1})
	own.get("/only")
	if own.m.reserve() {
		t.Fatal("second reservation with our cap at 1")
	}
	zero := settled(t, Config{}, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 0})
	if zero.m.reserve() {
		t.Fatal("reservation with MAX_CONCURRENT_STREAMS 0")
	}
}

// §5.1.1: stream identifiers are not reused; once they run out the
// connection takes no new stream.
func TestRFC_5_1_1_StreamIDsExhausted(t *testing.T) {
	h := settled(t, Config{})
	h.m.nextID = maxStreamID
	st := h.get("/last")
	if st.id != maxStreamID {
		t.Fatalf("id %d", st.id)
	}
	if h.m.reserve() {
		t.Fatal("reservation beyond the last stream identifier")
	}
}

// §6.8: after a GOAWAY no stream is opened; streams above its last
// stream ID fail as unprocessed, those at or below go on.
func TestRFC_6_8_GoAway(t *testing.T) {
	h := settled(t, Config{})
	a, b := h.get("/a"), h.get("/b") // 1, 3
	h.m.reserve()                    // a reservation made before the GOAWAY
	h.sent()
	h.sfr.WriteGoAway(1, http2.ErrCodeNo, bytes.Repeat([]byte("d"), 5000))
	h.pump()
	var ge *GoAwayError
	if !errors.As(b.err, &ge) || !ge.Unprocessed() || ge.StreamID != 3 || ge.LastStreamID != 1 {
		t.Fatalf("stream 3 error %v", b.err)
	}
	if len(ge.Debug) != MaxGoAwayDebug {
		t.Fatalf("debug data kept: %d bytes, want %d", len(ge.Debug), MaxGoAwayDebug)
	}
	if a.err != nil || h.m.reserve() {
		t.Fatalf("stream 1 error %v; reserve after GOAWAY", a.err)
	}
	req, _ := http.NewRequest("GET", "https://example.com/late", nil)
	head, _ := prepareRequest(req, false)
	late := &stream{req: req, head: head}
	if _, err := h.m.start(h.now, late); !errors.Is(err, ErrUnsent) || !errors.As(err, &ge) {
		t.Fatalf("start after GOAWAY: %v", err)
	}
	h.respond(a.id, "done")
	h.pump()
	if a.err != nil || a.phase != respDone {
		t.Fatalf("stream 1: %v", a.err)
	}
	if !h.m.closed || !h.m.finished {
		t.Fatal("connection not finished once the last stream below the GOAWAY ended")
	}
}

// §6.8: the last stream ID of a later GOAWAY may only go down; a raise
// is not believed.
func TestRFC_6_8_GoAwayNeverRaised(t *testing.T) {
	h := settled(t, Config{})
	a, b := h.get("/a"), h.get("/b") // 1, 3
	h.sent()
	h.sfr.WriteGoAway(3, http2.ErrCodeNo, nil)
	h.sfr.WriteGoAway(1, http2.ErrCodeNo, nil)
	h.sfr.WriteGoAway(21, http2.ErrCodeNo, nil)
	h.pump()
	var ge *GoAwayError
	if !errors.As(b.err, &ge) || !ge.Unprocessed() || ge.LastStreamID != 1 {
		t.Fatalf("stream 3: %v", b.err)
	}
	if a.err != nil || h.m.goAway.LastStreamID != 1 {
		t.Fatalf("stream 1: %v; boundary %d", a.err, h.m.goAway.LastStreamID)
	}
}

// §8.1: a server that completes its response before the request body
// may stop the upload with RST_STREAM(NO_ERROR); the response stands.
func TestRFC_8_1_ResetNoErrorAfterResponse(t *testing.T) {
	h := settled(t, Config{})
	st := h.post("/upload", 1<<20)
	h.sent()
	h.respond(st.id, "early")
	h.sfr.WriteRSTStream(st.id, http2.ErrCodeNo)
	h.pump()
	if st.err != nil || st.phase != respDone || st.stopUpload == nil {
		t.Fatalf("err %v phase %v stopUpload %v", st.err, st.phase, st.stopUpload)
	}
}

// Choice 24 and §6.5.2: no request body before the server's SETTINGS;
// the HEADERS go at once.
func TestRFC_NoBodyBeforeSettings(t *testing.T) {
	h := newHarness(t, Config{})
	h.sent()
	st := h.post("/p", 3)
	n, wait, err := h.m.sendBody(h.now, st, []byte("abc"), true)
	if n != 0 || !wait || err != nil {
		t.Fatalf("sendBody before SETTINGS: %d %v %v", n, wait, err)
	}
	frames := h.sent()
	if len(frames) != 1 {
		t.Fatalf("sent %v", frames)
	}
	if _, ok := frames[0].(*http2.MetaHeadersFrame); !ok {
		t.Fatalf("sent %v", frames[0])
	}
	h.sfr.WriteSettings()
	h.pump()
	n, wait, err = h.m.sendBody(h.now, st, []byte("abc"), true)
	if n != 3 || wait || err != nil {
		t.Fatalf("sendBody after SETTINGS: %d %v %v", n, wait, err)
	}
}

// RFC 8441 §4: an extended CONNECT waits for the server's SETTINGS and
// is refused, unsent, if they do not enable it.
func TestRFC8441ExtendedConnect(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		h := newHarness(t, Config{})
		h.sent()
		req, _ := http.NewRequest("CONNECT", "https://example.com/chat", nil)
		req.Header[":protocol"] = []string{"websocket"}
		head, err := prepareRequest(req, false)
		if err != nil {
			t.Fatal(err)
		}
		st := &stream{req: req, head: head, wakeResp: make(chan struct{}, 1)}
		h.m.reserve()
		if waiting, err := h.m.start(h.now, st); !waiting || err != nil {
			t.Fatalf("before SETTINGS: waiting %v, %v", waiting, err)
		}
		var s []http2.Setting
		if enabled {
			s = append(s, http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1})
		}
		h.sfr.WriteSettings(s...)
		h.pump()
		waiting, err := h.m.start(h.now, st)
		if !enabled {
			if !errors.Is(err, ErrUnsent) || !errors.Is(err, ErrExtendedConnectUnsupported) {
				t.Fatalf("not enabled: %v", err)
			}
			continue
		}
		if waiting || err != nil {
			t.Fatalf("enabled: waiting %v, %v", waiting, err)
		}
		for _, f := range h.sent() {
			if mh, ok := f.(*http2.MetaHeadersFrame); ok {
				if mh.PseudoValue("protocol") != "websocket" || mh.PseudoValue("method") != "CONNECT" || mh.PseudoValue("path") != "/chat" {
					t.Fatalf("sent %v", mh.Fields)
				}
			}
		}
	}
}

// §8.5: a plain CONNECT has :method and :authority only.
func TestRFC_8_5_PlainConnect(t *testing.T) {
	h := settled(t, Config{})
	req, _ := http.NewRequest("CONNECT", "https://proxy.example", nil)
	req.Host = "upstream.example:443"
	h.open(req, nil)
	for _, f := range h.sent() {
		if mh, ok := f.(*http2.MetaHeadersFrame); ok {
			for _, hf := range mh.PseudoFields() {
				if hf.Name == ":path" || hf.Name == ":scheme" {
					t.Fatalf("plain CONNECT sent %s", hf.Name)
				}
			}
			if mh.PseudoValue("authority") != "upstream.example:443" {
				t.Fatalf("authority %q", mh.PseudoValue("authority"))
			}
			return
		}
	}
	t.Fatal("no HEADERS sent")
}
