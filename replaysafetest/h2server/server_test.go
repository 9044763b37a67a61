package h2server_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kittest"
)

// start runs a server for the test and closes it at the end.
var start = kittest.Starter(h2server.New, func(c *h2server.Config) *func(string, ...any) { return &c.Logf })

var ctxT = kittest.Context

// one scripts the first connection's streams.
func one(actions ...h2server.Action) h2server.Config {
	return h2server.Config{Conns: []h2server.ConnScript{{Streams: actions}}}
}

func waitRequests(t *testing.T, s *h2server.Server, n int) []h2server.Received {
	t.Helper()
	if err := s.WaitRequests(ctxT(t), n); err != nil {
		t.Fatalf("WaitRequests(%d): %v (have %d)", n, err, s.Count())
	}
	return s.Requests()
}

func forBoth(t *testing.T, f func(t *testing.T, tls bool)) {
	t.Run("h2c", func(t *testing.T) { f(t, false) })
	t.Run("tls", func(t *testing.T) { f(t, true) })
}

func TestRawRespondRecordsEverything(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		cfg := one(h2server.Respond(201, http.Header{"X-Answer": {"42"}}, []byte("created")).
			WithTrailer(http.Header{"X-Checksum": {"abc"}}))
		cfg.TLS = useTLS
		s := start(t, cfg)
		rc := dialRaw(t, s, true)
		rc.headers(1, "POST", "/upload?x=1", false, hpack.HeaderField{Name: "x-req", Value: "v"})
		rc.data(1, "hello ", false)
		rc.data(1, "world", false)
		rc.hbuf.Reset()
		_ = rc.henc.WriteField(hpack.HeaderField{Name: "x-req-trailer", Value: "t"})
		if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}

		h := rc.read()
		if h.Type != http2.FrameHeaders || h.field(":status") != "201" || h.field("x-answer") != "42" || h.field("content-length") != "7" || h.EndStream {
			t.Fatalf("response headers: %v %v", h, h.Fields)
		}
		d := rc.read()
		if d.Type != http2.FrameData || d.Data != "created" || d.EndStream {
			t.Fatalf("response data: %v %q", d, d.Data)
		}
		tr := rc.read()
		if tr.Type != http2.FrameHeaders || tr.field("x-checksum") != "abc" || !tr.EndStream {
			t.Fatalf("response trailers: %v %v", tr, tr.Fields)
		}

		r := waitRequests(t, s, 1)[0]
		if r.Conn != 0 || r.Seq != 0 || r.StreamID != 1 || r.Method != "POST" || r.Path != "/upload?x=1" ||
			r.Scheme != "https" || r.Authority != "127.0.0.1" {
			t.Errorf("record: %+v", r)
		}
		if string(r.Body) != "hello world" || !r.EndStream || !r.Done || r.Action != replaysafetest.StreamRespond {
			t.Errorf("body %q end=%v done=%v action=%v", r.Body, r.EndStream, r.Done, r.Action)
		}
		if r.Header.Get("X-Req") != "v" || r.Trailer.Get("X-Req-Trailer") != "t" {
			t.Errorf("header %v trailer %v", r.Header, r.Trailer)
		}
		if len(r.Fields) != 5 || r.Fields[0].Name != ":method" || r.Fields[4].Name != "x-req" {
			t.Errorf("fields: %v", r.Fields)
		}
		c := s.Conns()[0]
		if !c.Preface || c.Streams != 1 || c.BytesRead <= int64(len(http2.ClientPreface)) || c.BytesWritten == 0 {
			t.Errorf("conn info: %+v", c)
		}
		if useTLS && (c.NegotiatedProtocol != "h2" || c.TCPBytesRead <= c.BytesRead || c.TCPBytesWritten <= c.BytesWritten) {
			t.Errorf("ALPN %q, TLS byte counts %+v", c.NegotiatedProtocol, c)
		}
		if !useTLS && (c.TCPBytesRead != c.BytesRead || c.TCPBytesWritten != c.BytesWritten) {
			t.Errorf("h2c byte counts differ: %+v", c)
		}
	})
}

func TestRawRefuseOnHeadersSkipsBody(t *testing.T) {
	s := start(t, one(h2server.Refuse(), h2server.OK("second")))
	rc := dialRaw(t, s, true)
	rc.headers(1, "POST", "/a", false)
	f := rc.read()
	if f.Type != http2.FrameRSTStream || f.StreamID != 1 || f.Code != http2.ErrCodeRefusedStream {
		t.Fatalf("got %v code %v, want RST_STREAM(REFUSED_STREAM) on 1", f, f.Code)
	}
	rc.data(1, "too late", true) // the server no longer reads stream 1
	rc.headers(3, "GET", "/b", true)
	f = rc.read()
	if f.Type != http2.FrameHeaders || f.StreamID != 3 || f.field(":status") != "200" {
		t.Fatalf("stream 3: %v %v", f, f.Fields)
	}
	rs := waitRequests(t, s, 2)
	if len(rs) != 2 {
		t.Fatalf("%d records", len(rs))
	}
	if r := rs[0]; r.StreamID != 1 || r.Action != replaysafetest.StreamRefuse || len(r.Body) != 0 || r.EndStream || !r.Done {
		t.Errorf("refused stream record: %+v", r)
	}
	if r := rs[1]; r.StreamID != 3 || r.Seq != 1 || r.Action != replaysafetest.StreamRespond {
		t.Errorf("second record: %+v", r)
	}
}

// TestRawRefuseAfterBodyAndReset: an action that waits for the whole body
// sends nothing before END_STREAM and then resets with its own code.
func TestRawRefuseAfterBodyAndReset(t *testing.T) {
	resetsAfterBody := func(action h2server.Action, want http2.ErrCode) {
		t.Run(action.String(), func(t *testing.T) {
			s := start(t, one(action))
			rc := dialRaw(t, s, true)
			rc.headers(1, "PUT", "/x", false)
			rc.data(1, "abc", false)
			// Nothing may come back before the body ends.
			if err := rc.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if f, err := rc.fr.ReadFrame(); err == nil && f.Header().Type == http2.FrameRSTStream {
				t.Fatalf("reset before the body ended")
			} else if err != nil && !isTimeout(err) {
				t.Fatalf("read: %v", err)
			}
			rc.data(1, "def", true)
			f := rc.read()
			if f.Type != http2.FrameRSTStream || f.Code != want {
				t.Fatalf("got %v %v, want RST_STREAM(%v)", f, f.Code, want)
			}
			r := waitRequests(t, s, 1)[0]
			if string(r.Body) != "abcdef" || !r.EndStream {
				t.Errorf("body %q end %v", r.Body, r.EndStream)
			}
		})
	}
	resetsAfterBody(h2server.RefuseAfterBody(), http2.ErrCodeRefusedStream)
	resetsAfterBody(h2server.Reset(http2.ErrCodeInternal), http2.ErrCodeInternal)
	resetsAfterBody(h2server.Reset(http2.ErrCodeProtocol), http2.ErrCodeProtocol)
}

func TestRawGoAway(t *testing.T) {
	t.Run("below-on-headers-then-close", func(t *testing.T) {
		s := start(t, one(h2server.OK("one"), h2server.GoAwayBelow().WithClose(h2server.CloseFIN)))
		rc := dialRaw(t, s, true)
		rc.headers(1, "GET", "/1", true)
		if f := rc.read(); f.Type != http2.FrameHeaders {
			t.Fatalf("stream 1: %v", f)
		}
		rc.read() // DATA "one"
		rc.headers(3, "POST", "/3", false)
		frames, err := rc.readUntilEnd()
		if !isEOF(err) {
			t.Errorf("end: %v, want EOF", err)
		}
		if len(frames) != 1 || frames[0].Type != http2.FrameGoAway || frames[0].Last != 1 || frames[0].Code != http2.ErrCodeNo {
			t.Fatalf("frames %v", frames)
		}
		rs := waitRequests(t, s, 2)
		if rs[1].StreamID != 3 || rs[1].Action != replaysafetest.StreamGoAway || len(rs[1].Body) != 0 {
			t.Errorf("record %+v", rs[1])
		}
		rc.c.Close() // ends the server's drain at once
		if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
			t.Fatal(err)
		}
		if c := s.Conns()[0]; !c.GoAwaySent || c.GoAwayLast != 1 || !c.Closed {
			t.Errorf("conn %+v", c)
		}
	})
	t.Run("at-after-body-keeps-answering", func(t *testing.T) {
		a := h2server.GoAwayAt().WithAt(h2server.AfterBody)
		a.Body = []byte("still answered")
		s := start(t, one(a))
		rc := dialRaw(t, s, true)
		rc.headers(1, "POST", "/1", false)
		rc.data(1, "body", true)
		g := rc.read()
		if g.Type != http2.FrameGoAway || g.Last != 1 {
			t.Fatalf("got %v last %d", g, g.Last)
		}
		if h := rc.read(); h.Type != http2.FrameHeaders || h.field(":status") != "200" {
			t.Fatalf("answer: %v", h)
		}
		if d := rc.read(); d.Data != "still answered" || !d.EndStream {
			t.Fatalf("data %v %q", d, d.Data)
		}
		// A new stream above the last stream ID is recorded but ignored.
		rc.headers(3, "GET", "/3", true)
		rs := waitRequests(t, s, 2)
		if !rs[1].Ignored || rs[1].StreamID != 3 {
			t.Errorf("stream 3: %+v", rs[1])
		}
		if err := rc.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if f, err := rc.fr.ReadFrame(); err == nil {
			t.Errorf("answer to an ignored stream: %v", f.Header())
		}
	})
	t.Run("on-headers-absolute-code", func(t *testing.T) {
		a := h2server.GoAway(0).WithCode(http2.ErrCodeEnhanceYourCalm)
		a.DebugData = []byte("calm")
		s := start(t, one(a))
		rc := dialRaw(t, s, true)
		rc.headers(1, "POST", "/1", false)
		g := rc.read()
		if g.Type != http2.FrameGoAway || g.Last != 0 || g.Code != http2.ErrCodeEnhanceYourCalm {
			t.Fatalf("got %v last %d code %v", g, g.Last, g.Code)
		}
		rc.data(1, "ignored", true)
		r := waitRequests(t, s, 1)[0]
		if len(r.Body) != 0 || r.EndStream {
			t.Errorf("body of a stream above the GOAWAY: %q end=%v", r.Body, r.EndStream)
		}
	})
}

func TestRawCloseMidRequest(t *testing.T) {
	t.Run("fin-on-headers", func(t *testing.T) {
		s := start(t, one(h2server.CloseConn()))
		rc := dialRaw(t, s, true)
		rc.headers(1, "POST", "/", false)
		frames, err := rc.readUntilEnd()
		if !isEOF(err) || len(frames) != 0 {
			t.Fatalf("frames %v, end %v; want nothing then EOF", frames, err)
		}
		r := waitRequests(t, s, 1)[0]
		if r.Action != replaysafetest.StreamClose || r.EndStream {
			t.Errorf("record %+v", r)
		}
	})
	t.Run("rst-after-body", func(t *testing.T) {
		s := start(t, one(h2server.CloseConnAfterBody().WithClose(h2server.CloseRST)))
		rc := dialRaw(t, s, true)
		rc.headers(1, "POST", "/", false)
		rc.data(1, "xyz", true)
		_, err := rc.readUntilEnd()
		if !isReset(err) {
			t.Fatalf("end %v, want ECONNRESET", err)
		}
		if r := waitRequests(t, s, 1)[0]; string(r.Body) != "xyz" || !r.EndStream {
			t.Errorf("record %+v", r)
		}
	})
}

func TestRawPartialHeaders(t *testing.T) {
	forBoth(t, func(t *testing.T, useTLS bool) {
		cfg := one(h2server.PartialHeaders().WithHeader("X-Long", strings.Repeat("v", 100)))
		cfg.TLS = useTLS
		s := start(t, cfg)
		rc := dialRaw(t, s, false)
		rc.headers(1, "GET", "/", true)
		frames, err := rc.readUntilEnd()
		if !isEOF(err) {
			t.Errorf("end %v, want EOF", err)
		}
		if len(frames) != 1 || frames[0].Type != http2.FrameHeaders || frames[0].Flags.Has(http2.FlagHeadersEndHeaders) || len(frames[0].Fragment) == 0 {
			t.Fatalf("frames %v", frames)
		}
	})
}

func TestRawHangThenClose(t *testing.T) {
	s := start(t, one(h2server.Hang(300*time.Millisecond)))
	rc := dialRaw(t, s, true)
	began := time.Now()
	rc.headers(1, "POST", "/", false)
	rc.data(1, "still ", false)
	rc.data(1, "recorded", true)
	frames, err := rc.readUntilEnd()
	if !isEOF(err) || len(frames) != 0 {
		t.Fatalf("frames %v end %v", frames, err)
	}
	if d := time.Since(began); d < 250*time.Millisecond {
		t.Errorf("closed after %v, before the hang ended", d)
	}
	if r := waitRequests(t, s, 1)[0]; string(r.Body) != "still recorded" || r.Action != replaysafetest.StreamHang {
		t.Errorf("record %+v", r)
	}
}

func TestRawSettingsPingAndFlowControl(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 10_000) // 100 000 bytes, beyond the initial window
	cfg := one(h2server.Respond(200, nil, body))
	cfg.MaxConcurrentStreams = 3
	s := start(t, cfg)
	rc := dialRaw(t, s, true, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
	if len(rc.serverSettings) != 1 || rc.serverSettings[0] != (http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 3}) {
		t.Errorf("server settings %v", rc.serverSettings)
	}
	if err := rc.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	var sawAck, sawPing bool
	for range 10 {
		f, err := rc.next()
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == http2.FrameSettings && f.Flags.Has(http2.FlagSettingsAck) {
			sawAck = true
		}
		if f.Type == http2.FramePing && f.Flags.Has(http2.FlagPingAck) && f.PingData == [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
			sawPing = true
		}
		if sawAck && sawPing {
			break
		}
	}
	if !sawAck || !sawPing {
		t.Fatalf("settings ack %v, ping ack %v", sawAck, sawPing)
	}

	rc.headers(1, "GET", "/big", true)
	if h := rc.read(); h.Type != http2.FrameHeaders {
		t.Fatalf("headers %v", h)
	}
	var got []byte
	for range 1000 {
		f := rc.read()
		if f.Type != http2.FrameData {
			t.Fatalf("unexpected %v", f)
		}
		got = append(got, f.Data...)
		if f.EndStream {
			break
		}
		// The stream window is 1000 bytes: grant back what each frame used.
		if err := rc.fr.WriteWindowUpdate(1, uint32(len(f.Data))); err != nil {
			t.Fatal(err)
		}
		if err := rc.fr.WriteWindowUpdate(0, uint32(len(f.Data))); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("got %d bytes, want %d identical ones", len(got), len(body))
	}
	if set := s.Conns()[0].Settings; len(set) != 1 || set[0].Val != 1000 {
		t.Errorf("recorded client settings %v", set)
	}
}

func TestEveryConnectionRefusesEverything(t *testing.T) {
	s := start(t, h2server.Config{Default: h2server.Every(h2server.Refuse())})
	for conn := range 3 {
		rc := dialRaw(t, s, true)
		for i := range 2 {
			id := uint32(2*i + 1)
			rc.headers(id, "GET", "/", true)
			if f := rc.read(); f.Type != http2.FrameRSTStream || f.Code != http2.ErrCodeRefusedStream || f.StreamID != id {
				t.Fatalf("conn %d stream %d: %v %v", conn, id, f, f.Code)
			}
		}
		rc.c.Close()
	}
	rs := waitRequests(t, s, 6)
	for i, r := range rs {
		if r.Conn != i/2 || r.Seq != i%2 || r.Action != replaysafetest.StreamRefuse {
			t.Errorf("record %d: conn %d seq %d action %v", i, r.Conn, r.Seq, r.Action)
		}
	}
	if len(s.Conns()) != 3 {
		t.Errorf("%d conns", len(s.Conns()))
	}
}

func TestBadPrefaceIsRecorded(t *testing.T) {
	s := start(t, h2server.Config{})
	c, err := s.Dial(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	if ci := s.Conns()[0]; ci.Preface || !strings.Contains(ci.Err, "preface") {
		t.Errorf("conn %+v", ci)
	}
}

func TestCloseEndsHangingConnections(t *testing.T) {
	s, err := h2server.New(h2server.Config{Default: h2server.Every(h2server.Hang(0)), HangTimeout: time.Hour, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, s, true)
	rc.headers(1, "GET", "/", true)
	if err := s.WaitRequests(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	kittest.Returns(t, "Close with a hanging connection", func() { s.Close() })
	if err := s.WaitRequests(ctxT(t), 2); !errors.Is(err, h2server.ErrClosed) {
		t.Errorf("wait after Close: %v, want ErrClosed", err)
	}
	if !s.Conns()[0].Closed {
		t.Errorf("connection not marked closed")
	}
	s.Close() // idempotent
}

func TestEnumStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{h2server.Kind(200).String(), "StreamKind(200)"}, // the shared kinds, tested in replaysafetest
		{h2server.CloseRST.String(), "rst"},
		{h2server.CloseMode(7).String(), "CloseMode(7)"},
		{h2server.GoAwayBelow().String(), "goaway@on-headers last=stream-2 code=NO_ERROR"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if h2server.Kind(200).Valid() || !replaysafetest.StreamHang.Valid() {
		t.Error("Kind.Valid")
	}
}

// ---- nginx emulation: RefuseBodyBeforeSettingsAck, MaxRequestsPerConn ----

// A body that arrives before the SETTINGS ACK is refused, as nginx with a
// small http2_body_preread_size does; a request without a body, and any
// request after the ACK, is served.
func TestRawRefuseBodyBeforeSettingsAck(t *testing.T) {
	s := start(t, h2server.Config{RefuseBodyBeforeSettingsAck: true, Default: h2server.Every(h2server.OK("served"))})
	rc := dialRawAck(t, s, true, false)
	rc.headers(1, "POST", "/early", false)
	rc.data(1, "early body", true)
	if f := rc.read(); f.Type != http2.FrameRSTStream || f.StreamID != 1 || f.Code != http2.ErrCodeRefusedStream {
		t.Fatalf("stream 1: %v %v, want RST_STREAM(REFUSED_STREAM)", f, f.Code)
	}
	rc.headers(3, "GET", "/nobody", true)
	if f := rc.read(); f.Type != http2.FrameHeaders || f.StreamID != 3 || f.field(":status") != "200" {
		t.Fatalf("stream 3: %v %v", f, f.Fields)
	}
	rc.read() // DATA "served"
	rc.ack()
	rc.headers(5, "POST", "/late", false)
	rc.data(5, "late body", true)
	if f := rc.read(); f.Type != http2.FrameHeaders || f.StreamID != 5 || f.field(":status") != "200" {
		t.Fatalf("stream 5: %v %v", f, f.Fields)
	}
	rs := waitRequests(t, s, 3)
	if len(rs) != 3 {
		t.Fatalf("%d records, want 3", len(rs))
	}
	if r := rs[0]; !r.PrereadRefused || r.Action != replaysafetest.StreamRefuse || len(r.Body) != 0 || !r.Done {
		t.Errorf("refused stream: %+v", r)
	}
	if r := rs[1]; r.PrereadRefused || r.Action != replaysafetest.StreamRespond {
		t.Errorf("bodiless stream: %+v", r)
	}
	if r := rs[2]; r.PrereadRefused || string(r.Body) != "late body" || !r.EndStream {
		t.Errorf("stream after the ACK: %+v", r)
	}
	if c := s.Conns()[0]; !c.SettingsAcked {
		t.Errorf("conn %+v: SettingsAcked false", c)
	}
}

// The N-th stream of a connection is served under a GOAWAY naming it, the
// connection then closes, and a client needs one connection per N
// requests.
func TestMaxRequestsPerConn(t *testing.T) {
	t.Run("raw", func(t *testing.T) {
		s := start(t, h2server.Config{MaxRequestsPerConn: 2})
		rc := dialRaw(t, s, true)
		rc.headers(1, "GET", "/1", true)
		rc.headers(3, "GET", "/3", true)
		frames, err := rc.readUntilEnd()
		if !isEOF(err) {
			t.Errorf("end: %v, want EOF", err)
		}
		var goaway, answers int
		for _, f := range frames {
			switch {
			case f.Type == http2.FrameGoAway:
				goaway++
				if f.Last != 3 || f.Code != http2.ErrCodeNo {
					t.Errorf("GOAWAY last %d code %v, want 3 NO_ERROR", f.Last, f.Code)
				}
			case f.Type == http2.FrameHeaders && f.field(":status") == "200":
				answers++
			}
		}
		if goaway != 1 || answers != 2 {
			t.Errorf("frames %v: %d GOAWAY, %d answers; want 1, 2", frames, goaway, answers)
		}
		if n := len(waitRequests(t, s, 2)); n != 2 || s.Accepted() != 1 {
			t.Errorf("%d streams on %d connections", n, s.Accepted())
		}
	})
	t.Run("net/http", func(t *testing.T) {
		s := start(t, h2server.Config{MaxRequestsPerConn: 3})
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: &p}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		for i := range 7 {
			res, err := c.Get(s.URL() + "/")
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		rs := waitRequests(t, s, 7)
		served := 0
		for _, r := range rs {
			if !r.Ignored {
				served++
			}
		}
		if served != 7 || s.Accepted() != 3 {
			t.Errorf("%d served of %d received on %d connections, want 7 on 3", served, len(rs), s.Accepted())
		}
	})
}

// Interim responses precede the action; an endless flood runs until the
// client goes away.
func TestInformational(t *testing.T) {
	t.Run("103-then-refuse", func(t *testing.T) {
		s := start(t, one(h2server.Refuse().WithInformational(103, http.Header{"Link": {"</x>"}})))
		rc := dialRaw(t, s, true)
		rc.headers(1, "POST", "/", false)
		if f := rc.read(); f.Type != http2.FrameHeaders || f.field(":status") != "103" || f.field("link") != "</x>" || f.EndStream {
			t.Fatalf("first frame %v %v, want 103", f, f.Fields)
		}
		if f := rc.read(); f.Type != http2.FrameRSTStream || f.Code != http2.ErrCodeRefusedStream {
			t.Fatalf("then %v %v, want RST_STREAM(REFUSED_STREAM)", f, f.Code)
		}
		if r := waitRequests(t, s, 1)[0]; r.Action != replaysafetest.StreamRefuse {
			t.Errorf("record %+v", r)
		}
	})
	t.Run("endless", func(t *testing.T) {
		s := start(t, one(h2server.Endless1xx(103)))
		rc := dialRaw(t, s, true)
		rc.headers(1, "GET", "/", true)
		const want = 5000
		for i := range want {
			if f := rc.read(); f.Type != http2.FrameHeaders || f.field(":status") != "103" {
				t.Fatalf("frame %d: %v %v", i, f, f.Fields)
			}
		}
		rc.c.Close()
		if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
			t.Fatal(err)
		}
		if c := s.Conns()[0]; c.BytesWritten < want*9 || s.Count() != 1 {
			t.Errorf("%d bytes written, %d streams received", c.BytesWritten, s.Count())
		}
	})
}

// The server holds its SETTINGS back until the first request, so a body
// sent at once after the preface is refused in every run; the hold does
// not end on the client's SETTINGS or WINDOW_UPDATE.
func TestRawSettingsHeldForTheFirstRequest(t *testing.T) {
	s := start(t, h2server.Config{RefuseBodyBeforeSettingsAck: true})
	c, err := s.Dial(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.henc = hpack.NewEncoder(&rc.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteWindowUpdate(0, 1<<20); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the hold outlasts a client's pause
	rc.headers(1, "POST", "/first", false)
	rc.data(1, "body", true)
	var got []string
	for range 3 {
		f, err := rc.next()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, f.Type.String()+map[bool]string{true: "-ack", false: ""}[f.Flags.Has(http2.FlagSettingsAck) && f.Type == http2.FrameSettings])
		if f.Type == http2.FrameRSTStream && f.Code != http2.ErrCodeRefusedStream {
			t.Errorf("RST_STREAM %v", f.Code)
		}
	}
	if want := []string{"SETTINGS", "SETTINGS-ack", "RST_STREAM"}; !slices.Equal(got, want) {
		t.Errorf("frames %q, want %q", got, want)
	}
	if r := waitRequests(t, s, 1)[0]; !r.PrereadRefused || len(r.Body) != 0 {
		t.Errorf("record %+v", r)
	}
}
