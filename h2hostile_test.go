package replaysafe_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// hostileH2 is one HTTP/2 server that floods or breaks the protocol,
// played over a pipe by hand-written frames, and what a call through
// the Transport must end with.
type hostileH2 struct {
	name string
	// serve plays the server on one connection, after it read the
	// client's preface; it returns when it is done or the pipe closed.
	serve func(c *hostileConn)
	// code is the connection error the client must raise (sent in its
	// GOAWAY and found in the call's error); 0: the call succeeds.
	code  http2.ErrCode
	first fsm.Rule // with two tries, the rule that resent the first
	rule  fsm.Rule // the rule that ends the call, when it fails
	tries int      // the call's attempts
	dials int32    // connections the Transport opens
}

// hostileH2Rows are the HTTP/2 rows of docs/reliability.md's hostile-input
// table played through the whole Transport: floods of frames that owe an
// answer while the server reads nothing, frames a server must not send,
// a window pushed past its limit, and floods on closed streams that must
// cost nothing.
var hostileH2Rows = []hostileH2{
	{
		// RFC 9113 §6.7: every PING is acknowledged; a server that
		// reads none of them makes the acknowledgements queue. The
		// client's preface and SETTINGS are never read either, so the
		// request's HEADERS never leave: the one resend is allowed
		// (RS12: the connection hands it back unsent) and meets the same server, and a
		// resend is not resent (RS08).
		name: "PING flood, server reads nothing",
		serve: func(c *hostileConn) {
			c.fr.WriteSettings()
			c.flood(func(i int) error { return c.fr.WritePing(false, [8]byte{byte(i)}) })
		},
		code: http2.ErrCodeEnhanceYourCalm, first: fsm.RuleEvidenceHandedBack, rule: fsm.RuleNoSecondResend, tries: 2, dials: 2,
	},
	{
		// RFC 9113 §6.5.3: every SETTINGS is acknowledged; the same
		// flood of acknowledgements owed.
		name: "SETTINGS flood, server reads nothing",
		serve: func(c *hostileConn) {
			c.flood(func(int) error {
				return c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100})
			})
		},
		code: http2.ErrCodeEnhanceYourCalm, first: fsm.RuleEvidenceHandedBack, rule: fsm.RuleNoSecondResend, tries: 2, dials: 2,
	},
	{
		// RFC 9113 §6.9.1: a WINDOW_UPDATE that takes the connection's
		// window past 2³¹−1 is a connection error FLOW_CONTROL_ERROR.
		// It comes after the GET's HEADERS, on a fresh connection: an
		// ambiguous failure, never resent.
		name: "connection window pushed past 2^31-1",
		serve: func(c *hostileConn) {
			fr := c.fr
			if !c.settleAndRead() {
				return
			}
			fr.WriteWindowUpdate(0, 1<<31-1)
			c.drain()
		},
		code: http2.ErrCodeFlowControl, rule: fsm.RuleAmbiguousFreshConn, tries: 1, dials: 1,
	},
	{
		// RFC 9113 §5.1: RST_STREAM on an idle stream (one the client
		// never opened) is a connection error PROTOCOL_ERROR.
		name: "RST_STREAM on a stream never opened",
		serve: func(c *hostileConn) {
			fr := c.fr
			if !c.settleAndRead() {
				return
			}
			fr.WriteRSTStream(101, http2.ErrCodeCancel)
			c.drain()
		},
		code: http2.ErrCodeProtocol, rule: fsm.RuleAmbiguousFreshConn, tries: 1, dials: 1,
	},
	{
		// RFC 9113 §6.6: a client that disabled push (SETTINGS_ENABLE_PUSH
		// 0) treats a PUSH_PROMISE as a connection error PROTOCOL_ERROR.
		name: "PUSH_PROMISE after ENABLE_PUSH 0",
		serve: func(c *hostileConn) {
			fr := c.fr
			id, ok := c.settleAndReadID()
			if !ok {
				return
			}
			fr.WritePushPromise(http2.PushPromiseParam{StreamID: id, PromiseID: 2, BlockFragment: encodeHeaders(":method", "GET", ":scheme", "http", ":authority", "hostile.test", ":path", "/pushed"), EndHeaders: true})
			c.drain()
		},
		code: http2.ErrCodeProtocol, rule: fsm.RuleAmbiguousFreshConn, tries: 1, dials: 1,
	},
	{
		// WINDOW_UPDATE and RST_STREAM on a stream that already ended
		// are ignored (RFC 9113 §5.1, closed state) and hold nothing: a
		// flood of 20,000 of each between two answers leaves the
		// connection serving.
		name: "WINDOW_UPDATE and RST_STREAM flood on a closed stream",
		serve: func(c *hostileConn) {
			fr := c.fr
			id, ok := c.settleAndReadID()
			if !ok {
				return
			}
			respond(fr, id)
			for range 20000 {
				if fr.WriteWindowUpdate(id, 1) != nil || fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
					return
				}
			}
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					return
				}
				if hf, ok := f.(*http2.MetaHeadersFrame); ok {
					c.headers.Add(1)
					respond(fr, hf.StreamID)
				}
			}
		},
		dials: 1, tries: 1,
	},
}

// TestH2HostileFrames plays each row of hostileH2Rows against a
// Transport under fake time: the call ends as the row says (or, for the
// floods on a closed stream, a second call on the same connection
// succeeds), the client's GOAWAY carries the row's error code, no call
// is resent beyond what nothing-written evidence allows, the server got
// at most one HEADERS per connection, and the allocations stay bounded.
func TestH2HostileFrames(t *testing.T) {
	for _, row := range hostileH2Rows {
		t.Run(row.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var dials, headers atomic.Int32
				var goAway atomic.Uint32
				goAway.Store(^uint32(0))
				serve := func(s net.Conn) {
					defer s.Close()
					if !readPreface(s) {
						return
					}
					fr := http2.NewFramer(s, s)
					fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
					row.serve(&hostileConn{fr: fr, headers: &headers, goAway: &goAway})
				}
				tr := replaysafe.New(replaysafe.Options{IgnoreProxyEnvironment: true, Protocol: replaysafe.ProtocolHTTP2, DialContext: pipeDialer(&dials, serve)})
				defer tr.CloseIdleConnections()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				req, _ := http.NewRequest("GET", "http://hostile.test/", nil)
				resp, err := tr.RoundTrip(req)
				if row.code == 0 {
					if err != nil {
						t.Fatalf("first GET: %v", err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					synctest.Wait() // the flood is read
					req2, _ := http.NewRequest("GET", "http://hostile.test/again", nil)
					resp2, err := tr.RoundTrip(req2)
					if err != nil {
						t.Fatalf("GET after the flood: %v", err)
					}
					io.Copy(io.Discard, resp2.Body)
					resp2.Body.Close()
					if n := headers.Load(); n != 2 {
						t.Errorf("the server got %d requests, want 2", n)
					}
				} else {
					if err == nil {
						resp.Body.Close()
						t.Fatal("a response from a server that broke the protocol")
					}
					t.Log(err)
					e := wantRule(t, err, row.rule, row.tries)
					if row.tries == 2 && (len(e.History) != 2 || e.History[0].Rule != row.first) {
						t.Errorf("history %v, want the first attempt resent by %v", e.History, row.first)
					}
					var ce *h2.ConnectionError
					if !errors.As(err, &ce) || ce.Code != row.code {
						t.Errorf("error %v, want an *h2.ConnectionError with code %v", err, row.code)
					}
					if n := headers.Load(); n > dials.Load() {
						t.Errorf("the server got %d HEADERS over %d connections", n, dials.Load())
					}
				}
				runtime.ReadMemStats(&after)
				tr.CloseIdleConnections()
				// A connection that failed on a server reading nothing
				// closes once its last write (the GOAWAY) gives up or
				// its drain ends, on timers: let fake time pass them
				// before the bubble ends, since it stops then.
				time.Sleep(time.Minute)
				synctest.Wait()
				if d := dials.Load(); d != row.dials {
					t.Errorf("%d connections, want %d", d, row.dials)
				}
				if row.code != 0 && row.tries == 1 {
					if g := goAway.Load(); g != uint32(row.code) {
						t.Errorf("the server got GOAWAY %v, want %v", http2.ErrCode(g), row.code)
					}
				}
				alloc := after.TotalAlloc - before.TotalAlloc
				t.Logf("allocated %.1f MiB during the call(s)", float64(alloc)/(1<<20))
				if alloc > 16<<20 {
					t.Errorf("allocated %d bytes during the call(s), the server's frames included: unbounded?", alloc)
				}
			})
		})
	}
}

// readPreface reads the client's connection preface from s and
// reports whether it was one.
func readPreface(s net.Conn) bool {
	preface := make([]byte, len(http2.ClientPreface))
	_, err := io.ReadFull(s, preface)
	return err == nil && string(preface) == http2.ClientPreface
}

// hostileConn is one connection of a hostile server: its framer, and
// the counts the test reads.
type hostileConn struct {
	fr      *http2.Framer
	headers *atomic.Int32  // request HEADERS read, on every connection
	goAway  *atomic.Uint32 // the code of the last GOAWAY read
}

// settleAndRead sends the server's SETTINGS, acknowledges the client's,
// and reads until the request's HEADERS arrive.
func (c *hostileConn) settleAndRead() bool {
	_, ok := c.settleAndReadID()
	return ok
}

// settleAndReadID is settleAndRead, returning the request's stream.
func (c *hostileConn) settleAndReadID() (uint32, bool) {
	if c.fr.WriteSettings() != nil {
		return 0, false
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return 0, false
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && c.fr.WriteSettingsAck() != nil {
				return 0, false
			}
		case *http2.MetaHeadersFrame:
			c.headers.Add(1)
			return f.StreamID, true
		}
	}
}

// flood writes frame 4 × DefaultMaxQueuedControlFrames times, reading
// nothing, until a write fails (the client closed).
func (c *hostileConn) flood(frame func(i int) error) {
	for i := range 4 * h2.DefaultMaxQueuedControlFrames {
		if frame(i) != nil {
			return
		}
	}
}

// drain reads frames until the connection ends, noting a GOAWAY.
func (c *hostileConn) drain() {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			c.goAway.Store(uint32(g.ErrCode))
		}
	}
}

// respond answers stream id with 200 and a short body.
func respond(fr *http2.Framer, id uint32) {
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: encodeHeaders(":status", "200"), EndHeaders: true})
	fr.WriteData(id, true, []byte("ok"))
}

// encodeHeaders returns the hpack encoding of the name-value pairs kv.
func encodeHeaders(kv ...string) []byte {
	var b bytesBuffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(kv); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return b.b
}

// bytesBuffer is the io.Writer hpack encodes into.
type bytesBuffer struct{ b []byte }

func (b *bytesBuffer) Write(p []byte) (int, error) { b.b = append(b.b, p...); return len(p), nil }
