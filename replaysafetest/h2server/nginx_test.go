package h2server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

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
	if want := "SETTINGS SETTINGS-ack RST_STREAM"; strings.Join(got, " ") != want {
		t.Errorf("frames %q, want %q", got, want)
	}
	if r := waitRequests(t, s, 1)[0]; !r.PrereadRefused || len(r.Body) != 0 {
		t.Errorf("record %+v", r)
	}
}
