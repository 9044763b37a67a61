package replaysafe_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/replaysafe/replaysafe"
)

// h2Seen is what a raw h2c server read of the client's connection
// setup: its SETTINGS, its connection WINDOW_UPDATE, and the PINGs it got
// before it answered.
type h2Seen struct {
	settings map[http2.SettingID]uint32
	connIncr uint32
	pings    int
	requests int
	answered bool
}

// pingGatedH2C starts an h2c server on 127.0.0.1 that records the
// client's SETTINGS and connection WINDOW_UPDATE and answers a request
// only after the client has sent it a PING (which it acknowledges): a
// request gets its response only if the connection sends liveness PINGs.
// The server stops with the test.
func pingGatedH2C(t *testing.T) (string, func() h2Seen) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := h2Seen{settings: map[http2.SettingID]uint32{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		wg.Go(func() { <-t.Context().Done(); c.Close() })
		if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
		fr := http2.NewFramer(c, c)
		fr.WriteSettings()
		var stream uint32
		for range 1000 { // a bounded conversation
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			mu.Lock()
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					f.ForeachSetting(func(s http2.Setting) error { seen.settings[s.ID] = s.Val; return nil })
					fr.WriteSettingsAck()
				}
			case *http2.WindowUpdateFrame:
				if f.StreamID == 0 {
					seen.connIncr += f.Increment
				}
			case *http2.HeadersFrame:
				seen.requests++
				stream = f.StreamID
			case *http2.PingFrame:
				if !f.IsAck() {
					seen.pings++
					fr.WritePing(true, f.Data)
					if stream != 0 && !seen.answered {
						var hb bytes.Buffer
						hpack.NewEncoder(&hb).WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
						fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: hb.Bytes(), EndHeaders: true})
						fr.WriteData(stream, true, []byte("pinged"))
						seen.answered = true
					}
				}
			}
			mu.Unlock()
		}
	})
	return "http://" + ln.Addr().String(), func() h2Seen {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// TestHTTP2ConfigReachesTheWire: Options.HTTP2 with net/http's field
// names sets what the connection advertises (the frame size, the stream
// and connection windows) and its liveness PING: the server answers only
// once it has been pinged, and the request, made while the connection
// reads nothing, gets its answer; the server saw one request.
func TestHTTP2ConfigReachesTheWire(t *testing.T) {
	base, seen := pingGatedH2C(t)
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2, HTTP2: &http.HTTP2Config{
		MaxReadFrameSize:              64 << 10,
		MaxReceiveBufferPerStream:     256 << 10,
		MaxReceiveBufferPerConnection: 1 << 20,
		SendPingTimeout:               20 * time.Millisecond,
		PingTimeout:                   time.Minute,
	}})
	t.Cleanup(tr.CloseIdleConnections)
	code, body, err := roundTrip(tr, newRequest(t, t.Context(), "GET", base+"/p", ""))
	if err != nil || code != 200 || body != "pinged" {
		t.Fatalf("%d %q %v", code, body, err)
	}
	s := seen()
	if s.settings[http2.SettingMaxFrameSize] != 64<<10 || s.settings[http2.SettingInitialWindowSize] != 256<<10 {
		t.Errorf("SETTINGS %v, want MAX_FRAME_SIZE 65536 and INITIAL_WINDOW_SIZE 262144", s.settings)
	}
	if s.connIncr != 1<<20-65535 {
		t.Errorf("connection WINDOW_UPDATE %d, want %d (a 1 MiB window)", s.connIncr, 1<<20-65535)
	}
	if s.pings < 1 || s.requests != 1 {
		t.Errorf("server saw %d PINGs and %d requests, want at least 1 and exactly 1", s.pings, s.requests)
	}
}

// TestFromTransportTakesHTTP2: FromTransport takes an http.Transport's
// HTTP2 settings as a copy of its own, so changing the http.Transport's
// afterwards changes nothing here.
func TestFromTransportTakesHTTP2(t *testing.T) {
	ht := &http.Transport{HTTP2: &http.HTTP2Config{SendPingTimeout: time.Second, MaxReadFrameSize: 32 << 10}}
	o := replaysafe.FromTransport(ht)
	if o.HTTP2 == nil || o.HTTP2 == ht.HTTP2 || o.HTTP2.SendPingTimeout != time.Second || o.HTTP2.MaxReadFrameSize != 32<<10 {
		t.Fatalf("HTTP2 %+v, want %+v", o.HTTP2, ht.HTTP2)
	}
	ht.HTTP2.SendPingTimeout = time.Hour
	if o.HTTP2.SendPingTimeout != time.Second {
		t.Errorf("the Options share the http.Transport's HTTP2Config")
	}
}
