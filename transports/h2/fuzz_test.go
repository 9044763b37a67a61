package h2

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fuzzMaxOut bounds what the machine may queue for the writer between
// two flushes while the fuzzer feeds it: acknowledgements (bounded by
// MaxQueuedControlFrames), window updates and resets.
const fuzzMaxOut = 1 << 20

// FuzzServerFrames feeds arbitrary server bytes (what follows the client
// preface on the wire) to the machine, with three streams open (a GET 1,
// a POST 3 uploading, a CONNECT 5), then to a ClientConn over net.Pipe.
// Whatever the bytes: no panic, bounded memory, every stream ends once
// the connection does, every goroutine returns.
// Its seeds are committed under testdata/fuzz/FuzzServerFrames (see
// TestWriteFuzzSeeds).
func FuzzServerFrames(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		fuzzMachine(t, data)
		fuzzClientConn(t, data)
	})
}

func fuzzMachine(t *testing.T, data []byte) {
	m := newMachine(Config{MaxQueuedControlFrames: 1000, MaxHeaderListSize: 1 << 16}.normalize(), time.Unix(0, 0))
	streams := []*stream{fuzzStream(m, "GET", 0), fuzzStream(m, "POST", 1<<20), fuzzStream(m, "CONNECT", -1)}
	var b outBuf
	m.take(&b)
	m.written(time.Unix(0, 0), &b, len(b.buf), nil)
	b.reset(false)
	src := &frameSource{r: bytes.NewReader(data)}
	fr := http2.NewFramer(nil, src)
	fr.SetMaxReadFrameSize(m.cfg.maxReadFrame)
	fr.SetReuseFrames()
	buf := make([]byte, 4096)
	body := make([]byte, 20000)
	for i := 0; !m.closed; i++ { // each pass reads one frame; the input bounds it
		now := time.Unix(int64(i), 0)
		fh, f, err := readFrame(fr, src)
		if err != nil {
			m.framerError(now, fh, err, fr.ErrorDetail())
		} else {
			m.frame(now, f)
		}
		if len(m.out.buf) > fuzzMaxOut {
			t.Fatalf("%d bytes queued for the writer", len(m.out.buf))
		}
		for _, st := range streams {
			if int(st.buf.n) > int(m.cfg.streamWindow) {
				t.Fatalf("stream %d buffers %d bytes", st.id, st.buf.n)
			}
		}
		switch i % 4 {
		case 1:
			if m.take(&b) {
				m.written(now, &b, len(b.buf), nil)
				b.reset(false)
			}
		case 2:
			for _, st := range streams {
				m.readBody(st, buf)
			}
		case 3:
			m.sendBody(now, streams[1], body, false)
			m.tick(now)
		}
	}
	m.readFailed(time.Unix(1e6, 0), io.EOF)
	if m.take(&b) {
		m.written(time.Unix(1e6, 0), &b, len(b.buf), nil)
	}
	if len(m.streams) != 0 || m.active != 0 {
		t.Fatalf("%d streams left, %d active", len(m.streams), m.active)
	}
	for _, st := range streams {
		if st.err == nil && st.phase != respDone {
			t.Fatalf("stream %d did not end", st.id)
		}
		if st.open || st.deferred {
			t.Fatalf("stream %d: open %v, deferred %v", st.id, st.open, st.deferred)
		}
	}
}

func fuzzStream(m *machine, method string, n int64) *stream {
	var body io.Reader
	if n != 0 {
		body = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, "https://fuzz.example/", body)
	if method == "CONNECT" {
		req.Host = "upstream.example:443"
	}
	req.ContentLength = n
	head, err := prepareRequest(req, true)
	if err != nil {
		panic(err)
	}
	st := &stream{req: req, head: head, ev: NopEvents{}}
	m.reserve()
	if waiting, err := m.start(time.Unix(0, 0), st); waiting || err != nil {
		panic(fmt.Sprint(waiting, err))
	}
	return st
}

func fuzzClientConn(t *testing.T, data []byte) {
	client, server := net.Pipe()
	defer server.Close()
	go io.Copy(io.Discard, server) // the server reads whatever we send
	cc, err := NewClientConn(client, Config{MaxQueuedControlFrames: 1000, PingAfter: -1, SettingsTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{}, 3)
	for _, method := range []string{"GET", "POST", "CONNECT"} {
		var body io.Reader
		if method != "GET" {
			body = bytes.NewReader(make([]byte, 1000))
		}
		req, _ := http.NewRequestWithContext(ctx, method, "http://fuzz.example/", body)
		req.Host = "fuzz.example:80"
		cc.Reserve()
		go func() {
			defer func() { done <- struct{}{} }()
			res, err := cc.RoundTrip(req, NopEvents{})
			if err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	server.Write(data)
	server.Close()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for range 3 {
		select {
		case <-done:
		case <-timeout.C:
			t.Fatal("a RoundTrip did not return after the connection closed")
		}
	}
	select {
	case <-cc.Done():
	case <-timeout.C:
		t.Fatal("the connection's goroutines did not return")
	}
}

// fuzzSeeds are server byte streams that reach the interesting states:
// a normal exchange on the three streams, trailers, a GOAWAY, a header
// block in CONTINUATION frames, a flood, malformed responses.
func fuzzSeeds() [][]byte {
	seed := func(script func(fr *http2.Framer, block func(kv ...string) []byte)) []byte {
		var out bytes.Buffer
		fr := http2.NewFramer(&out, nil)
		fr.AllowIllegalWrites = true
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		block := func(kv ...string) []byte {
			hb.Reset()
			for i := 0; i+1 < len(kv); i += 2 {
				enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
			}
			return bytes.Clone(hb.Bytes())
		}
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100})
		fr.WriteSettingsAck()
		script(fr, block)
		return out.Bytes()
	}
	headers := func(fr *http2.Framer, id uint32, end bool, b []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: end, EndHeaders: true})
	}
	return [][]byte{
		seed(func(fr *http2.Framer, block func(...string) []byte) {
			headers(fr, 1, false, block(":status", "200", "content-length", "5"))
			fr.WriteData(1, true, []byte("hello"))
			fr.WriteWindowUpdate(0, 100000)
			fr.WriteWindowUpdate(3, 100000)
			headers(fr, 3, false, block(":status", "103", "link", "</x>"))
			headers(fr, 3, false, block(":status", "200", "trailer", "x-t"))
			fr.WriteData(3, false, []byte("part"))
			headers(fr, 3, true, block("x-t", "done"))
			headers(fr, 5, false, block(":status", "200"))
			fr.WriteData(5, true, []byte("tunnel"))
		}),
		seed(func(fr *http2.Framer, block func(...string) []byte) {
			fr.WritePing(false, [8]byte{1})
			fr.WriteGoAway(1, http2.ErrCodeNo, []byte("bye"))
			headers(fr, 1, true, block(":status", "204"))
		}),
		seed(func(fr *http2.Framer, block func(...string) []byte) {
			b := block(":status", "200", "x-long", strings.Repeat("v", 300))
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:100]})
			fr.WriteContinuation(1, false, b[100:200])
			fr.WriteContinuation(1, true, b[200:])
			fr.WriteRSTStream(3, http2.ErrCodeRefusedStream)
			fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		}),
		seed(func(fr *http2.Framer, block func(...string) []byte) {
			for range 50 {
				fr.WritePing(false, [8]byte{2})
				fr.WriteSettings()
			}
			headers(fr, 1, false, block(":status", "200", "content-length", "1"))
			fr.WriteDataPadded(1, true, []byte("xy"), make([]byte, 10))
		}),
		seed(func(fr *http2.Framer, block func(...string) []byte) {
			headers(fr, 1, true, block(":status", "200", "Bad", "1"))
			headers(fr, 3, false, block("x", "1", ":status", "200"))
			fr.WriteRawFrame(0xee, 0, 0, []byte("unknown"))
			fr.WritePriority(9, http2.PriorityParam{Weight: 1})
			fr.WriteData(5, false, []byte("early"))
		}),
	}
}

// TestWriteFuzzSeeds writes the seeds to testdata/fuzz/FuzzServerFrames
// when H2_WRITE_FUZZ_SEEDS=1 (they are committed).
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("H2_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set H2_WRITE_FUZZ_SEEDS=1 to rewrite the committed seeds")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzServerFrames")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"exchange", "goaway", "continuation", "flood-padding", "malformed"}
	for i, s := range fuzzSeeds() {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, names[i]), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
