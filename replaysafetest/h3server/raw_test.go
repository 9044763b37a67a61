package h3server_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// rawClient speaks HTTP/3 frame by frame over a QUIC connection, to check
// the bytes the server sends and to send what quic-go's client never does.
type rawClient struct {
	t              *testing.T
	qc             *quic.Conn
	ctrl           *quic.SendStream // the client's control stream
	srvCtrl        quicvarint.Reader
	serverSettings []h3server.Setting
}

// dialRaw connects, sends the client's control stream with SETTINGS and
// reads the server's control stream up to its SETTINGS.
func dialRaw(t *testing.T, s *h3server.Server, settings ...h3server.Setting) *rawClient {
	t.Helper()
	qc, err := s.Dial(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	c := &rawClient{t: t, qc: qc}
	if c.ctrl, err = qc.OpenUniStream(); err != nil {
		t.Fatal(err)
	}
	var p []byte
	for _, s := range settings {
		p = quicvarint.Append(quicvarint.Append(p, s.ID), s.Value)
	}
	c.write(c.ctrl, frame(quicvarint.Append(nil, 0x00), 0x04, p))

	str, err := qc.AcceptUniStream(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := str.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	c.srvCtrl = quicvarint.NewReader(str)
	if typ, err := quicvarint.Read(c.srvCtrl); err != nil || typ != 0x00 {
		t.Fatalf("server unidirectional stream type %#x, %v; want a control stream", typ, err)
	}
	typ, p, err := readFrame(c.srvCtrl)
	if err != nil || typ != 0x04 {
		t.Fatalf("first control frame %#x, %v; want SETTINGS", typ, err)
	}
	for len(p) > 0 {
		id, n, err := quicvarint.Parse(p)
		if err != nil {
			t.Fatal(err)
		}
		v, m, err := quicvarint.Parse(p[n:])
		if err != nil {
			t.Fatal(err)
		}
		c.serverSettings = append(c.serverSettings, h3server.Setting{ID: id, Value: v})
		p = p[n+m:]
	}
	return c
}

func (c *rawClient) write(w io.Writer, b []byte) {
	c.t.Helper()
	if _, err := w.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// open opens a request stream whose reads time out after 5 s.
func (c *rawClient) open() *quic.Stream {
	c.t.Helper()
	str, err := c.qc.OpenStreamSync(ctxT(c.t))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := str.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		c.t.Fatal(err)
	}
	return str
}

// readAll reads frames until the stream ends, and returns them with the
// error that ended it (io.EOF for a FIN).
func readAll(str *quic.Stream) ([]rawFrame, error) {
	r := quicvarint.NewReader(str)
	var out []rawFrame
	for range 100 {
		typ, p, err := readFrame(r)
		if err != nil {
			return out, err
		}
		out = append(out, rawFrame{typ, p})
	}
	return out, errors.New("more than 100 frames")
}

type rawFrame struct {
	Type    uint64
	Payload []byte
}

func readFrame(r quicvarint.Reader) (uint64, []byte, error) {
	typ, err := quicvarint.Read(r)
	if err != nil {
		return 0, nil, err
	}
	n, err := quicvarint.Read(r)
	if err != nil {
		return 0, nil, err
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return typ, p, nil
}

// frame appends a frame to b.
func frame(b []byte, typ uint64, payload []byte) []byte {
	b = quicvarint.Append(b, typ)
	b = quicvarint.Append(b, uint64(len(payload)))
	return append(b, payload...)
}

// fields encodes a QPACK field section, name and value alternating.
func fields(kv ...string) []byte {
	var buf bytes.Buffer
	enc := qpack.NewEncoder(&buf)
	for i := 0; i+1 < len(kv); i += 2 {
		if err := enc.WriteField(qpack.HeaderField{Name: kv[i], Value: kv[i+1]}); err != nil {
			panic(err)
		}
	}
	return buf.Bytes()
}

func decode(t *testing.T, p []byte) map[string]string {
	t.Helper()
	next := qpack.NewDecoder().Decode(p)
	m := make(map[string]string)
	for range 1000 {
		f, err := next()
		if err == io.EOF {
			return m
		}
		if err != nil {
			t.Fatalf("QPACK: %v", err)
		}
		m[f.Name] = f.Value
	}
	t.Fatal("more than 1000 fields")
	return nil
}

func requestHeaders(method, path string, extra ...string) []byte {
	return frame(nil, 0x01, fields(append([]string{
		":method", method, ":scheme", "https", ":authority", "127.0.0.1", ":path", path,
	}, extra...)...))
}

func TestRawSettingsFramesAndTrailers(t *testing.T) {
	cfg := one(h3server.OK("ok").WithTrailer(http.Header{"X-Resp": {"t"}}))
	cfg.Settings = []h3server.Setting{{ID: 0x4242, Value: 7}}
	s := start(t, cfg)
	c := dialRaw(t, s, h3server.Setting{ID: 0x06, Value: 4096}, h3server.Setting{ID: 0x21, Value: 1})
	// No QPACK dynamic table, no blocked streams (RFC 9204 §5), then the
	// configured extras.
	want := []h3server.Setting{{ID: 0x01, Value: 0}, {ID: 0x07, Value: 0}, {ID: 0x4242, Value: 7}}
	if !slices.Equal(c.serverSettings, want) {
		t.Errorf("server SETTINGS %v, want %v", c.serverSettings, want)
	}

	str := c.open()
	b := requestHeaders("POST", "/raw", "x-req", "v")
	b = frame(b, 0x21, []byte("a reserved frame type: skipped")) // RFC 9114 §7.2.8
	b = frame(b, 0x00, []byte("hello "))
	b = frame(b, 0x00, nil)
	b = frame(b, 0x00, []byte("world"))
	b = frame(b, 0x01, fields("x-req-trailer", "t"))
	c.write(str, b)
	if err := str.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(str)
	if !errors.Is(err, io.EOF) {
		t.Errorf("response ended with %v, want a FIN", err)
	}
	if len(got) != 3 || got[0].Type != 0x01 || got[1].Type != 0x00 || got[2].Type != 0x01 {
		t.Fatalf("response frames %v", got)
	}
	if h := decode(t, got[0].Payload); h[":status"] != "200" || h["content-length"] != "2" || len(h) != 2 {
		t.Errorf("response fields %v", h)
	}
	if string(got[1].Payload) != "ok" {
		t.Errorf("response body %q", got[1].Payload)
	}
	if h := decode(t, got[2].Payload); h["x-resp"] != "t" || len(h) != 1 {
		t.Errorf("response trailers %v", h)
	}

	r := waitRequests(t, s, 1)[0]
	if string(r.Body) != "hello world" || !r.FIN || r.Path != "/raw" || r.Authority != "127.0.0.1" || r.Header.Get("X-Req") != "v" ||
		r.Trailer.Get("X-Req-Trailer") != "t" || len(r.Fields) != 5 || r.Fields[4].Name != "x-req" {
		t.Errorf("record %+v", r)
	}
	// The control stream is read apart from the request streams.
	eventually(t, "the client SETTINGS recorded", func() bool { return s.Conns()[0].SettingsReceived })
	if ci := s.Conns()[0]; !slices.Equal(ci.Settings, []h3server.Setting{{ID: 0x06, Value: 4096}, {ID: 0x21, Value: 1}}) {
		t.Errorf("client SETTINGS recorded %v", ci.Settings)
	}

	c.write(c.ctrl, frame(nil, 0x07, quicvarint.Append(nil, 8)))
	eventually(t, "the client GOAWAY recorded", func() bool { return s.Conns()[0].ClientGoAway })
	if id := s.Conns()[0].ClientGoAwayID; id != 8 {
		t.Errorf("client GOAWAY %d, want 8", id)
	}
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not after 5 s: %s", what)
		}
	}
}

func TestRawGoAwayFrames(t *testing.T) {
	// Stream 0 stays open; stream 4 sends GOAWAY(4) and is rejected;
	// stream 0 then asks for GOAWAY(100), which may not raise the ID
	// (RFC 9114 §5.2), and is answered.
	s := start(t, one(h3server.GoAway(100).WithAt(h3server.AfterBody).WithResponse(200, []byte("zero")),
		h3server.GoAwayRejecting()))
	c := dialRaw(t, s)
	s0 := c.open()
	c.write(s0, requestHeaders("POST", "/0"))
	if err := s.WaitCount(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	s4 := c.open()
	c.write(s4, requestHeaders("GET", "/4"))
	s4.Close() // fails if the server's STOP_SENDING came first
	if typ, p, err := readFrame(c.srvCtrl); err != nil || typ != 0x07 || !bytes.Equal(p, []byte{4}) {
		t.Fatalf("control frame %#x %x %v, want GOAWAY(4)", typ, p, err)
	}
	_, err := readAll(s4)
	if se, ok := errors.AsType[*quic.StreamError](err); !ok || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeRequestRejected) {
		t.Fatalf("stream 4 ended with %v, want H3_REQUEST_REJECTED", err)
	}

	c.write(s0, frame(nil, 0x00, []byte("body")))
	if err := s0.Close(); err != nil {
		t.Fatal(err)
	}
	if typ, p, err := readFrame(c.srvCtrl); err != nil || typ != 0x07 || !bytes.Equal(p, []byte{4}) {
		t.Fatalf("control frame %#x %x %v, want GOAWAY(4) again", typ, p, err)
	}
	got, err := readAll(s0)
	if !errors.Is(err, io.EOF) || len(got) != 2 || string(got[1].Payload) != "zero" {
		t.Fatalf("stream 0: frames %v, end %v", got, err)
	}
	if ci := s.Conns()[0]; ci.GoAwayID != 4 {
		t.Errorf("recorded GOAWAY %d", ci.GoAwayID)
	}
}

func TestRawMalformedStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		code http3.ErrCode
	}{
		{"data-before-headers", frame(nil, 0x00, []byte("x")), http3.ErrCodeFrameUnexpected},
		{"bad-qpack", frame(nil, 0x01, []byte{0x00, 0x00, 0xff}), http3.ErrCodeQPACKDecompressionFailed},
		{"fin-inside-headers", []byte{0x01, 0x10, 0x00}, http3.ErrCodeFrameError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, h3server.Config{})
			c := dialRaw(t, s)
			str := c.open()
			c.write(str, tc.b)
			str.Close() // fails if the server's STOP_SENDING came first
			_, err := readAll(str)
			if se, ok := errors.AsType[*quic.StreamError](err); !ok || se.ErrorCode != quic.StreamErrorCode(tc.code) {
				t.Fatalf("stream ended with %v, want %v", err, tc.code)
			}
			if s.Count() != 0 {
				t.Errorf("%d records for a stream without HEADERS", s.Count())
			}
		})
	}
}

func TestRawTrailersThenDataIsRejected(t *testing.T) {
	s := start(t, h3server.Config{})
	c := dialRaw(t, s)
	str := c.open()
	b := requestHeaders("POST", "/")
	b = frame(b, 0x00, []byte("a"))
	b = frame(b, 0x01, fields("x-t", "1"))
	b = frame(b, 0x00, []byte("after the trailers"))
	c.write(str, b)
	str.Close() // fails if the server's STOP_SENDING came first
	_, err := readAll(str)
	if se, ok := errors.AsType[*quic.StreamError](err); !ok || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeFrameError) {
		t.Fatalf("stream ended with %v, want H3_FRAME_ERROR", err)
	}
	r := waitRequests(t, s, 1)[0]
	if string(r.Body) != "a" || r.Trailer.Get("X-T") != "1" || r.FIN || r.Err == "" || !r.ServerReset {
		t.Errorf("record %+v", r)
	}
}

// An endless flood of interim responses goes on until the client resets
// the stream.
func TestRawEndless1xx(t *testing.T) {
	s := start(t, one(h3server.Endless1xx(103)))
	c := dialRaw(t, s)
	str := c.open()
	c.write(str, requestHeaders("GET", "/"))
	if err := str.Close(); err != nil {
		t.Fatal(err)
	}
	r := quicvarint.NewReader(str)
	const want = 3000
	for i := range want {
		typ, p, err := readFrame(r)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if typ != 0x01 || decode(t, p)[":status"] != "103" {
			t.Fatalf("frame %d: type %#x %v", i, typ, decode(t, p))
		}
	}
	str.CancelRead(quic.StreamErrorCode(0x10c)) // H3_REQUEST_CANCELLED: the flood ends
	if r := s.Receipts(); len(r) != 1 || r[0].Path != "/" || s.Accepted() != 1 {
		t.Errorf("receipts %+v, accepted %d", r, s.Accepted())
	}
	if rs, err := s.WaitRequests(ctxT(t), 1); err != nil || len(rs) != 1 || rs[0].Method != "GET" {
		t.Errorf("requests %+v", rs)
	}
}
