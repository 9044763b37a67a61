package h2server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

// rawClient is a minimal HTTP/2 client built on http2.Framer, for driving
// the server frame by frame and seeing exactly what it sends back.
type rawClient struct {
	t    *testing.T
	c    net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
	// serverSettings holds the parameters of the server's first SETTINGS.
	serverSettings []http2.Setting
}

// dialRaw connects, sends the preface and an empty SETTINGS frame, and
// reads the server's SETTINGS. With meta, response header blocks are
// decoded into MetaHeadersFrames; without, HEADERS frames arrive raw.
func dialRaw(t *testing.T, s *h2server.Server, meta bool, settings ...http2.Setting) *rawClient {
	t.Helper()
	return dialRawAck(t, s, meta, true, settings...)
}

// dialRawAck is dialRaw that acknowledges the server's SETTINGS only with
// ack (a test without it sends the ACK itself, later).
func dialRawAck(t *testing.T, s *h2server.Server, meta, ack bool, settings ...http2.Setting) *rawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.Dial(ctx)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	if meta {
		rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	}
	rc.henc = hpack.NewEncoder(&rc.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatalf("preface: %v", err)
	}
	if err := rc.fr.WriteSettings(settings...); err != nil {
		t.Fatalf("settings: %v", err)
	}
	fi, err := rc.next()
	if err != nil {
		t.Fatalf("reading the server's SETTINGS: %v", err)
	}
	if fi.Type != http2.FrameSettings || fi.Flags.Has(http2.FlagSettingsAck) {
		t.Fatalf("first server frame: %v, want SETTINGS", fi)
	}
	rc.serverSettings = fi.Settings
	if ack {
		rc.ack()
	}
	return rc
}

// ack acknowledges the server's SETTINGS.
func (rc *rawClient) ack() {
	rc.t.Helper()
	if err := rc.fr.WriteSettingsAck(); err != nil {
		rc.t.Fatalf("settings ack: %v", err)
	}
}

// headers sends a request header block on stream id.
func (rc *rawClient) headers(id uint32, method, path string, endStream bool, extra ...hpack.HeaderField) {
	rc.t.Helper()
	rc.hbuf.Reset()
	fields := []hpack.HeaderField{
		{Name: ":method", Value: method},
		{Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "127.0.0.1"},
		{Name: ":path", Value: path},
	}
	for _, f := range append(fields, extra...) {
		if err := rc.henc.WriteField(f); err != nil {
			rc.t.Fatalf("hpack: %v", err)
		}
	}
	err := rc.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID:      id,
		BlockFragment: rc.hbuf.Bytes(),
		EndStream:     endStream,
		EndHeaders:    true,
	})
	if err != nil {
		rc.t.Fatalf("write HEADERS: %v", err)
	}
}

func (rc *rawClient) data(id uint32, b string, endStream bool) {
	rc.t.Helper()
	if err := rc.fr.WriteData(id, endStream, []byte(b)); err != nil {
		rc.t.Fatalf("write DATA: %v", err)
	}
}

// next reads one frame within 5 s and copies what the tests compare.
func (rc *rawClient) next() (frameInfo, error) {
	if err := rc.c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return frameInfo{}, err
	}
	f, err := rc.fr.ReadFrame()
	if err != nil {
		return frameInfo{}, err
	}
	return info(f), nil
}

// boring reports whether a frame is flow-control or acknowledgement noise.
func (fi frameInfo) boring() bool {
	switch fi.Type {
	case http2.FrameWindowUpdate:
		return true
	case http2.FrameSettings, http2.FramePing:
		return fi.Flags.Has(http2.FlagSettingsAck) // same bit as FlagPingAck
	}
	return false
}

// read reads the next interesting frame and fails the test on an error.
func (rc *rawClient) read() frameInfo {
	rc.t.Helper()
	for range 1000 {
		fi, err := rc.next()
		if err != nil {
			rc.t.Fatalf("read frame: %v", err)
		}
		if !fi.boring() {
			return fi
		}
	}
	rc.t.Fatal("too many control frames")
	return frameInfo{}
}

// readUntilEnd reads the interesting frames until reading fails, and
// returns them with the error that ended the reading.
func (rc *rawClient) readUntilEnd() ([]frameInfo, error) {
	var out []frameInfo
	for range 1000 {
		fi, err := rc.next()
		if err != nil {
			return out, err
		}
		if !fi.boring() {
			out = append(out, fi)
		}
	}
	return out, errors.New("too many frames")
}

// frameInfo is a frame reduced to what the tests compare; Framer frames
// are only valid until the next read.
type frameInfo struct {
	Type      http2.FrameType
	StreamID  uint32
	Flags     http2.Flags
	Code      http2.ErrCode // RST_STREAM, GOAWAY
	Last      uint32        // GOAWAY
	Data      string        // DATA
	PingData  [8]byte       // PING
	Fields    []hpack.HeaderField
	Fragment  []byte // HEADERS read without ReadMetaHeaders
	Settings  []http2.Setting
	EndStream bool
}

func info(f http2.Frame) frameInfo {
	h := f.Header()
	fi := frameInfo{Type: h.Type, StreamID: h.StreamID, Flags: h.Flags}
	switch f := f.(type) {
	case *http2.RSTStreamFrame:
		fi.Code = f.ErrCode
	case *http2.GoAwayFrame:
		fi.Code, fi.Last = f.ErrCode, f.LastStreamID
	case *http2.DataFrame:
		fi.Data, fi.EndStream = string(f.Data()), f.StreamEnded()
	case *http2.PingFrame:
		fi.PingData = f.Data
	case *http2.MetaHeadersFrame:
		fi.Type = http2.FrameHeaders
		fi.Fields, fi.EndStream = append([]hpack.HeaderField(nil), f.Fields...), f.StreamEnded()
	case *http2.HeadersFrame:
		fi.Fragment, fi.EndStream = bytes.Clone(f.HeaderBlockFragment()), f.StreamEnded()
	case *http2.SettingsFrame:
		_ = f.ForeachSetting(func(s http2.Setting) error {
			fi.Settings = append(fi.Settings, s)
			return nil
		})
	}
	return fi
}

// field returns the value of the named field of a decoded header block.
func (fi frameInfo) field(name string) string {
	for _, f := range fi.Fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

func (fi frameInfo) String() string {
	return fi.Type.String() + " stream=" + strconv.Itoa(int(fi.StreamID)) + " flags=" + strconv.Itoa(int(fi.Flags))
}

// isTimeout reports whether err is a read deadline.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
