package h2

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// harness drives a machine alone: the test plays the server by writing
// frames with its own Framer, and reads what the machine sends.
type harness struct {
	t   tb
	m   *machine
	now time.Time

	toClient bytes.Buffer   // frames the server wrote, not yet fed
	src      frameSource    // toClient as the Framer reads it
	cfr      *http2.Framer  // reads them as the ClientConn does
	sfr      *http2.Framer  // the server's writer into toClient
	henc     *hpack.Encoder // the server's HPACK encoder
	hbuf     bytes.Buffer

	fromClient bytes.Buffer  // what the machine wrote, preface stripped
	rfr        *http2.Framer // reads it, decoding header blocks
	preface    bool
}

// tb is what the harness needs of a test: testing.TB or *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func newHarness(t tb, cfg Config) *harness {
	h := &harness{t: t, now: time.Unix(1000, 0)}
	h.m = newMachine(cfg.normalize(), h.now)
	h.src.r = &h.toClient
	h.cfr = http2.NewFramer(nil, &h.src)
	h.cfr.SetMaxReadFrameSize(h.m.cfg.maxReadFrame)
	h.sfr = http2.NewFramer(&h.toClient, nil)
	h.sfr.AllowIllegalWrites = true
	h.henc = hpack.NewEncoder(&h.hbuf)
	h.rfr = http2.NewFramer(nil, &h.fromClient)
	h.rfr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	return h
}

// settled returns a harness whose server sent SETTINGS (s) and whose
// preface and ACK were flushed.
func settled(t tb, cfg Config, s ...http2.Setting) *harness {
	h := newHarness(t, cfg)
	h.sfr.WriteSettings(s...)
	h.sfr.WriteSettingsAck()
	h.pump()
	h.sent()
	return h
}

// pump feeds every frame the server wrote to the machine, as readLoop
// does.
func (h *harness) pump() {
	for h.toClient.Len() > 0 && !h.m.closed {
		fh, f, err := readFrame(h.cfr, &h.src)
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				h.t.Fatalf("truncated frame in the test script: %v", err)
			}
			h.m.framerError(h.now, fh, err, h.cfr.ErrorDetail())
			continue
		}
		h.m.frame(h.now, f)
	}
}

// block encodes a header block for the server: name, value pairs.
func (h *harness) block(kv ...string) []byte {
	h.hbuf.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		h.henc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return bytes.Clone(h.hbuf.Bytes())
}

// headers writes a HEADERS frame with a complete block.
func (h *harness) headers(id uint32, end bool, kv ...string) {
	h.sfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block(kv...), EndStream: end, EndHeaders: true})
}

// respond writes a 200 response with body on stream id.
func (h *harness) respond(id uint32, body string) {
	h.headers(id, body == "", ":status", "200", "content-length", itoa(len(body)))
	if body != "" {
		h.sfr.WriteData(id, true, []byte(body))
	}
}

// sent takes everything the machine queued, reports it written in full,
// and returns the frames (copies of the ones that matter).
func (h *harness) sent() []http2.Frame {
	return h.sentN(-1, nil)
}

// sentN is sent with a write that accepted only n bytes (-1: all) and
// failed with err.
func (h *harness) sentN(n int, err error) []http2.Frame {
	var b outBuf
	if !h.m.take(&b) {
		return nil
	}
	if n < 0 {
		n = len(b.buf)
	}
	data := b.buf[:n]
	if !h.preface {
		if !bytes.HasPrefix(data, []byte(http2.ClientPreface)) {
			h.t.Fatalf("the machine did not start with the client preface")
		}
		data = data[len(http2.ClientPreface):]
		h.preface = true
	}
	h.fromClient.Write(data)
	h.m.written(h.now, &b, n, err)
	var out []http2.Frame
	for h.fromClient.Len() >= 9 {
		f, err := h.rfr.ReadFrame()
		if err != nil {
			break
		}
		out = append(out, copyFrame(f))
	}
	return out
}

// copyFrame keeps what tests look at in frames the Framer will reuse.
func copyFrame(f http2.Frame) http2.Frame {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		g := *f
		g.Fields = append([]hpack.HeaderField(nil), f.Fields...)
		return &g
	case *http2.DataFrame:
		return &sentData{StreamID: f.StreamID, Data: bytes.Clone(f.Data()), End: f.StreamEnded(), FrameHeader: f.FrameHeader}
	case *http2.SettingsFrame:
		s := &sentSettings{FrameHeader: f.FrameHeader, Ack: f.IsAck(), Values: map[http2.SettingID]uint32{}}
		for i := range f.NumSettings() {
			s.Values[f.Setting(i).ID] = f.Setting(i).Val
		}
		return s
	case *http2.GoAwayFrame:
		g := *f
		return &g
	case *http2.RSTStreamFrame:
		g := *f
		return &g
	case *http2.WindowUpdateFrame:
		g := *f
		return &g
	case *http2.PingFrame:
		g := *f
		return &g
	}
	return f
}

// sentSettings is a copy of a SETTINGS frame we sent.
type sentSettings struct {
	http2.FrameHeader
	Ack    bool
	Values map[http2.SettingID]uint32
}

// sentData is a copy of a DATA frame we sent.
type sentData struct {
	http2.FrameHeader
	StreamID uint32
	Data     []byte
	End      bool
}

// request makes a stream for req (as RoundTrip does) and starts it;
// the harness holds the reservation.
func (h *harness) open(req *http.Request, ev StreamEvents) *stream {
	h.t.Helper()
	head, err := prepareRequest(req, false)
	if err != nil {
		h.t.Fatal(err)
	}
	st := &stream{ev: ev, req: req, head: head, wakeResp: make(chan struct{}, 1), wakeSend: make(chan struct{}, 1)}
	if !h.m.reserve() {
		h.t.Fatal("reserve failed")
	}
	waiting, err := h.m.start(h.now, st)
	if err != nil || waiting {
		h.t.Fatalf("start: waiting %v, %v", waiting, err)
	}
	return st
}

func (h *harness) get(path string) *stream {
	req, _ := http.NewRequest("GET", "https://example.com"+path, nil)
	return h.open(req, nil)
}

// connect opens a plain CONNECT tunnel (full duplex: the stream stays
// open on our side after the server ends its side).
func (h *harness) connect() *stream {
	req, _ := http.NewRequest("CONNECT", "https://proxy.example", io.NopCloser(strings.NewReader("")))
	req.Host = "upstream.example:443"
	return h.open(req, nil)
}

// post opens a POST whose body the test sends with sendBody.
func (h *harness) post(path string, n int64) *stream {
	req, _ := http.NewRequest("POST", "https://example.com"+path, io.NopCloser(strings.NewReader("")))
	req.ContentLength = n
	return h.open(req, nil)
}

// connErr returns the connection's *ConnectionError code, failing the
// test if the connection did not end with one.
func (h *harness) connErr() http2.ErrCode {
	h.t.Helper()
	ce, ok := h.m.err.(*ConnectionError)
	if !ok {
		h.t.Fatalf("connection error = %v, want a *ConnectionError", h.m.err)
	}
	return ce.Code
}

// goAwaySent returns the GOAWAY the machine queued, if any.
func (h *harness) goAwaySent() (*http2.GoAwayFrame, bool) {
	for _, f := range h.sent() {
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g, true
		}
	}
	return nil, false
}

// recorder is a StreamEvents that logs the events.
type recorder struct {
	mu        sync.Mutex
	log       []string
	id        uint32
	body      int64
	on1xx     func(status int) error
	infoSizes []int
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}
func (r *recorder) HeadersWritten(id uint32) { r.id = id; r.add("headers-written") }
func (r *recorder) BodyWritten(n int64)      { r.body += n; r.add("body-written") }
func (r *recorder) RequestWritten()          { r.add("request-written") }
func (r *recorder) ResponseStarted()         { r.add("response-started") }
func (r *recorder) Informational(status int, _ http.Header, size int) error {
	r.add("1xx-" + itoa(status))
	r.infoSizes = append(r.infoSizes, size)
	if r.on1xx != nil {
		return r.on1xx(status)
	}
	return nil
}
func (r *recorder) ResponseHeaders(status int) { r.add("response-" + itoa(status)) }

func (r *recorder) events() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.log, " ")
}
