package h2server

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// Protocol constants the server relies on (RFC 9113 §6.5.2, §6.9.2).
const (
	initialWindow   = 65535   // default stream and connection flow-control window
	defaultMaxFrame = 1 << 14 // default SETTINGS_MAX_FRAME_SIZE
	maxHeaderList   = 1 << 20 // the largest request header list the server decodes
)

// conn serves one accepted connection. A single goroutine (serve) owns
// every field except tcp, which Server.Close may close to unblock it.
type conn struct {
	s      *Server
	rec    *connRecord
	idx    int
	tcp    *net.TCPConn
	nc     net.Conn  // tcp (counted), or the TLS connection over it
	tc     *tls.Conn // nil for h2c
	cc     *countingConn
	fr     *http2.Framer
	script *ConnScript

	hbuf bytes.Buffer
	henc *hpack.Encoder

	streams     map[uint32]*stream // streams the server still reads or answers
	maxStream   uint32             // highest client stream ID seen
	nextSeq     int                // Seq of the next stream the client opens
	goAway      bool               // the server sent a GOAWAY
	goAwayLast  uint32             // its last stream ID
	connWindow  int64              // what the server may still send on the connection
	initWindow  int64              // the client's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame    int                // the client's SETTINGS_MAX_FRAME_SIZE
	hangUntil   time.Time          // when a hanging stream ends the connection
	hangMode    CloseMode          // how it does
	gotSettings bool               // the client's first SETTINGS arrived
	settingsAck bool               // the client acknowledged the server's SETTINGS
	holdUntil   time.Time          // the server's SETTINGS wait until then, or the first HEADERS
	ackPending  bool               // the client's SETTINGS await their ACK (during the hold)
	served      int                // streams handled (not refused, not ignored)
	closeIdle   bool               // close the connection once no stream is left
}

// stream is the server's state for one stream it has not finished with.
type stream struct {
	id           uint32
	rec          *Received
	action       Action
	reading      bool // the server still reads the request
	acted        bool // the action has run
	respondAtEnd bool // answer once the request is complete (a GOAWAY that spares it)
	sending      bool // a response is under way
	window       int64
	pending      []byte      // response body not yet sent (flow control)
	trailer      http.Header // response trailer to send after pending
}

func newConn(s *Server, rec *connRecord, tcp *net.TCPConn) *conn {
	c := &conn{
		s:          s,
		rec:        rec,
		idx:        rec.info.Index,
		tcp:        tcp,
		nc:         &tcpCounter{TCPConn: tcp, rec: rec},
		script:     kit.ScriptFor(s.cfg.Conns, s.cfg.Default, rec.info.Index),
		streams:    make(map[uint32]*stream),
		connWindow: initialWindow,
		initWindow: initialWindow,
		maxFrame:   defaultMaxFrame,
	}
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// tcpCounter counts the bytes crossing the TCP connection, TLS records
// included.
type tcpCounter struct {
	*net.TCPConn
	rec *connRecord
}

func (c *tcpCounter) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	c.rec.tcpRead.Add(int64(n))
	return n, err
}

func (c *tcpCounter) Write(p []byte) (int, error) {
	n, err := c.TCPConn.Write(p)
	c.rec.tcpWritten.Add(int64(n))
	return n, err
}

// countingConn counts the HTTP/2 bytes of one connection and puts a
// deadline on every write.
type countingConn struct {
	net.Conn
	rec          *connRecord
	writeTimeout time.Duration
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.rec.read.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.writeTimeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(p)
	c.rec.written.Add(int64(n))
	return n, err
}

func (c *conn) logf(format string, args ...any) {
	c.s.core.Logf("conn %d: "+format, append([]any{c.idx}, args...)...)
}

// fail notes why the server ended the connection.
func (c *conn) fail(err error) {
	c.logf("%v", err)
	c.s.core.Update(func() {
		if c.rec.info.Err == "" {
			c.rec.info.Err = err.Error()
		}
	})
}

// serve runs the connection until it ends. Every iteration blocks on one
// frame read under a deadline, so the loop ends within IdleTimeout (or the
// hang deadline) of the client's last frame, or when Server.Close closes
// the TCP connection.
func (c *conn) serve() {
	defer c.finish()
	if err := c.start(); err != nil {
		c.fail(err)
		return
	}
	for {
		if err := c.nc.SetReadDeadline(c.readDeadline()); err != nil {
			c.fail(err)
			return
		}
		f, err := c.fr.ReadFrame()
		if err != nil && !c.holdUntil.IsZero() && kit.IsTimeout(err) {
			// No HEADERS within SettingsHold: send the SETTINGS and go on.
			if err := c.releaseSettings(); err != nil {
				c.fail(err)
				return
			}
			continue
		}
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				if err := c.onStreamError(se); err != nil {
					c.fail(err)
					return
				}
				continue
			}
			c.onReadError(err)
			return
		}
		closed, err := c.handle(f)
		if err != nil {
			c.fail(err)
			return
		}
		if closed {
			return
		}
		if c.closeIdle && len(c.streams) == 0 {
			c.logf("every stream up to the GOAWAY is answered: closing")
			c.closeWith(CloseFIN)
			return
		}
	}
}

// start runs the TLS handshake, reads the client preface and sends the
// server's SETTINGS, all within HandshakeTimeout.
func (c *conn) start() error {
	deadline := time.Now().Add(c.s.cfg.HandshakeTimeout)
	if c.s.tlsCfg != nil {
		tc := tls.Server(c.nc, c.s.tlsCfg)
		if err := tc.SetDeadline(deadline); err != nil {
			return err
		}
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		proto := tc.ConnectionState().NegotiatedProtocol
		c.s.core.Update(func() { c.rec.info.NegotiatedProtocol = proto })
		c.tc, c.nc = tc, tc
		if proto != http2.NextProtoTLS {
			return fmt.Errorf("ALPN negotiated %q, not %q", proto, http2.NextProtoTLS)
		}
	}
	c.cc = &countingConn{Conn: c.nc, rec: c.rec, writeTimeout: c.s.cfg.WriteTimeout}
	if err := c.nc.SetReadDeadline(deadline); err != nil {
		return err
	}
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.cc, preface[:]); err != nil {
		return fmt.Errorf("reading the client preface: %w", err)
	}
	if string(preface[:]) != http2.ClientPreface {
		return fmt.Errorf("bad client preface %q", preface[:])
	}
	c.s.core.Update(func() { c.rec.info.Preface = true })

	c.fr = http2.NewFramer(c.cc, c.cc)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = maxHeaderList
	if c.s.cfg.RefuseBodyBeforeSettingsAck {
		c.holdUntil = time.Now().Add(SettingsHold)
		return nil
	}
	return c.writeSettings()
}

// releaseSettings ends the hold of RefuseBodyBeforeSettingsAck: it sends
// the server's SETTINGS, then the ACK of the client's if they came.
func (c *conn) releaseSettings() error {
	if err := c.writeSettings(); err != nil {
		return err
	}
	if c.ackPending {
		c.ackPending = false
		if err := c.fr.WriteSettingsAck(); err != nil {
			return err
		}
	}
	return nil
}

// writeSettings sends the server's SETTINGS frame.
func (c *conn) writeSettings() error {
	c.holdUntil = time.Time{}
	var settings []http2.Setting
	if n := c.s.cfg.MaxConcurrentStreams; n != 0 {
		settings = append(settings, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: n})
	}
	settings = append(settings, c.s.cfg.Settings...)
	if err := c.fr.WriteSettings(settings...); err != nil {
		return fmt.Errorf("writing SETTINGS: %w", err)
	}
	return nil
}

func (c *conn) readDeadline() time.Time {
	if !c.holdUntil.IsZero() {
		return c.holdUntil
	}
	if !c.hangUntil.IsZero() {
		return c.hangUntil
	}
	return time.Now().Add(c.s.cfg.IdleTimeout)
}

// onReadError ends the connection after a failed frame read.
func (c *conn) onReadError(err error) {
	switch {
	case kit.IsTimeout(err):
		if !c.hangUntil.IsZero() && !time.Now().Before(c.hangUntil) {
			c.logf("hang over: closing (%v)", c.hangMode)
			c.closeWith(c.hangMode)
			return
		}
		c.fail(errors.New("idle timeout"))
		c.closeWith(CloseFIN)
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		c.logf("client closed (%v)", err)
	default:
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			// Best effort: the connection is ending either way.
			_ = c.fr.WriteGoAway(c.maxStream, http2.ErrCode(ce), nil)
			c.fail(err)
			c.closeWith(CloseFIN)
			return
		}
		c.fail(fmt.Errorf("reading a frame: %w", err))
	}
}

// onStreamError answers a stream-level framing error from the Framer
// (such as an invalid header field) by resetting that stream.
func (c *conn) onStreamError(se http2.StreamError) error {
	c.logf("stream %d: %v", se.StreamID, se)
	if se.StreamID > c.maxStream && se.StreamID%2 == 1 {
		c.maxStream = se.StreamID
	}
	if st := c.streams[se.StreamID]; st != nil {
		return c.resetStream(st, se.Code)
	}
	return c.fr.WriteRSTStream(se.StreamID, se.Code)
}

// finish closes the connection and marks its records final.
func (c *conn) finish() {
	c.nc.Close()
	c.tcp.Close()
	c.s.core.Update(func() {
		c.rec.info.Closed = true
		for _, st := range c.streams {
			st.rec.Done = true
		}
		delete(c.s.live, c)
	})
	c.streams = nil
	c.s.core.WG.Done()
}

// closeWith closes the connection. A FIN close shuts the write side (after
// a close_notify over TLS), discards what the client still sends for up to
// DrainTimeout so that unread bytes do not turn the FIN into an RST, then
// closes.
func (c *conn) closeWith(mode CloseMode) {
	// The server reads no stream any more: their records are final.
	c.s.core.Update(func() {
		for _, st := range c.streams {
			st.rec.Done = true
		}
	})
	if mode == CloseRST {
		_ = c.tcp.SetLinger(0)
		c.tcp.Close()
		return
	}
	if c.tc != nil && mode != CloseFINNoNotify {
		_ = c.tc.CloseWrite()
	}
	_ = c.tcp.CloseWrite()
	if err := c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.DrainTimeout)); err == nil {
		var buf [4096]byte
		for { // bounded by the read deadline
			if _, err := c.cc.Read(buf[:]); err != nil {
				break
			}
		}
	}
	c.tcp.Close()
}

// handle processes one frame; closed reports that an action closed the
// connection.
func (c *conn) handle(f http2.Frame) (closed bool, err error) {
	_, ping := f.(*http2.PingFrame)
	_, data := f.(*http2.DataFrame)
	if !c.holdUntil.IsZero() && (ping || data) { // frames the server answers
		if err := c.releaseSettings(); err != nil {
			return false, err
		}
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			if !c.settingsAck {
				c.settingsAck = true
				c.s.core.Update(func() { c.rec.info.SettingsAcked = true })
			}
			return false, nil
		}
		if err := c.applySettings(f); err != nil {
			return false, err
		}
		if !c.holdUntil.IsZero() {
			c.ackPending = true
			return false, nil
		}
		if err := c.fr.WriteSettingsAck(); err != nil {
			return false, err
		}
		return false, c.sendAll()
	case *http2.PingFrame:
		if f.IsAck() {
			return false, nil
		}
		return false, c.fr.WritePing(true, f.Data)
	case *http2.WindowUpdateFrame:
		return false, c.onWindowUpdate(f)
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.RSTStreamFrame:
		c.onClientReset(f)
	case *http2.GoAwayFrame:
		c.s.core.Update(func() { c.rec.info.ClientGoAway = true })
	}
	return false, nil
}

func (c *conn) applySettings(f *http2.SettingsFrame) error {
	var got []http2.Setting
	err := f.ForeachSetting(func(s http2.Setting) error {
		got = append(got, s)
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.initWindow
			c.initWindow = int64(s.Val)
			for _, st := range c.streams {
				st.window += delta
			}
		case http2.SettingMaxFrameSize:
			c.maxFrame = int(s.Val)
		}
		return nil
	})
	if !c.gotSettings {
		c.gotSettings = true
		c.s.core.Update(func() { c.rec.info.Settings = got })
	}
	return err
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	if f.StreamID == 0 {
		c.connWindow += int64(f.Increment)
		return c.sendAll()
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil
	}
	st.window += int64(f.Increment)
	if st.sending {
		return c.send(st)
	}
	return nil
}

// onHeaders handles a request header block, or the trailers of a request
// under way.
func (c *conn) onHeaders(f *http2.MetaHeadersFrame) (bool, error) {
	id := f.StreamID
	if st := c.streams[id]; st != nil {
		if !st.reading {
			return false, nil
		}
		trailer := make(http.Header)
		for _, hf := range f.RegularFields() {
			trailer.Add(hf.Name, hf.Value)
		}
		c.s.core.Update(func() { st.rec.Trailer = trailer })
		if f.StreamEnded() {
			return c.endOfRequest(st)
		}
		return false, nil
	}
	if id%2 == 0 || id <= c.maxStream {
		// Not a new client stream: a closed stream or a server-side ID.
		// The server records; it does not police.
		c.logf("stream %d: HEADERS ignored (not a new client stream)", id)
		return false, nil
	}
	c.maxStream = id
	seq := c.nextSeq
	c.nextSeq++
	rec := newReceived(c.idx, seq, f)
	ignored := c.goAway && id > c.goAwayLast
	refused := !ignored && c.s.cfg.RefuseBodyBeforeSettingsAck && !c.settingsAck && !rec.EndStream
	if !c.holdUntil.IsZero() {
		if err := c.releaseSettings(); err != nil {
			return false, err
		}
	}
	var a Action
	switch {
	case refused:
		a = Refuse()
	case !ignored:
		a = c.script.Nth(c.served, OK("ok"))
		c.served++
	}
	c.s.core.Update(func() {
		rec.Ignored = ignored
		rec.PrereadRefused = refused
		rec.Action = a.Kind
		rec.Done = ignored || rec.EndStream
		c.s.core.Reqs = append(c.s.core.Reqs, rec)
		c.rec.info.Streams++
	})
	if ignored {
		c.logf("stream %d (seq %d): ignored, above GOAWAY last stream %d", id, seq, c.goAwayLast)
		return false, nil
	}
	st := &stream{id: id, rec: rec, action: a, reading: !rec.EndStream, window: c.initWindow}
	c.streams[id] = st
	if refused {
		c.logf("stream %d (seq %d): %s %s with a body before the SETTINGS ACK: refused", id, seq, rec.Method, rec.Path)
		return false, c.resetStream(st, http2.ErrCodeRefusedStream)
	}
	c.logf("stream %d (seq %d): %s %s -> %v", id, seq, rec.Method, rec.Path, a)
	if n := c.s.cfg.MaxRequestsPerConn; n > 0 && c.served == n {
		if _, err := c.writeGoAway(id, http2.ErrCodeNo, nil); err != nil {
			return false, err
		}
		c.closeIdle = true
	}
	for _, inf := range a.Informational {
		if err := c.writeBlock(id, c.encodeInformational(inf), false); err != nil {
			return false, err
		}
	}
	if a.Endless1xx != 0 {
		return true, c.flood(st)
	}
	if a.At == OnHeaders || !st.reading {
		return c.act(st)
	}
	return false, nil
}

// flood sends interim responses with status a.Endless1xx on the stream
// until a write fails (the client went away), the server closes, or
// EndlessMaxResponses or EndlessMaxDuration is reached; then it closes
// the connection.
func (c *conn) flood(st *stream) error {
	a := st.action
	block := c.encodeInformational(Informational{Status: a.Endless1xx, Header: a.Header})
	deadline := time.Now().Add(EndlessMaxDuration)
	n := 0
	defer func() { c.logf("stream %d: sent %d interim %d responses; closing", st.id, n, a.Endless1xx) }()
	for ; n < EndlessMaxResponses; n++ {
		if n%1024 == 0 {
			select {
			case <-c.s.done:
				return nil
			default:
			}
			if time.Now().After(deadline) {
				break
			}
		}
		if err := c.writeBlock(st.id, block, false); err != nil {
			c.logf("stream %d: interim flood ends: %v", st.id, err)
			c.tcp.Close()
			return nil
		}
	}
	c.closeWith(CloseFIN)
	return nil
}

func newReceived(connIdx, seq int, f *http2.MetaHeadersFrame) *Received {
	p, h := kit.SplitFields(f.Fields, func(hf hpack.HeaderField) (string, string) { return hf.Name, hf.Value })
	return &Received{
		StreamRecord: replaysafetest.StreamRecord{Conn: connIdx, Seq: seq, At: time.Now(), Header: h,
			Method: p.Method, Scheme: p.Scheme, Authority: p.Authority, Path: p.Path, Protocol: p.Protocol},
		StreamID: f.StreamID, Fields: append([]hpack.HeaderField(nil), f.Fields...), EndStream: f.StreamEnded(),
	}
}

func (c *conn) onData(f *http2.DataFrame) (bool, error) {
	// Flow control counts the whole payload, padding included; the
	// connection window is returned even for streams the server ignores.
	n := f.Header().Length
	if n > 0 {
		if err := c.fr.WriteWindowUpdate(0, n); err != nil {
			return false, err
		}
	}
	st := c.streams[f.StreamID]
	if st == nil || !st.reading {
		return false, nil
	}
	data, ended := f.Data(), f.StreamEnded()
	max := c.s.cfg.MaxBodyBytes
	c.s.core.Update(func() {
		take := min(len(data), max-len(st.rec.Body))
		st.rec.Body = append(st.rec.Body, data[:take]...)
		st.rec.BodyDropped += int64(len(data) - take)
		if ended {
			st.rec.EndStream = true
			st.rec.Done = true
		}
	})
	if ended {
		return c.endOfRequest(st)
	}
	if n > 0 {
		if err := c.fr.WriteWindowUpdate(st.id, n); err != nil {
			return false, err
		}
	}
	return false, nil
}

// endOfRequest runs once END_STREAM arrived on a stream the server reads.
func (c *conn) endOfRequest(st *stream) (bool, error) {
	st.reading = false
	c.s.core.Update(func() {
		st.rec.EndStream = true
		st.rec.Done = true
	})
	switch {
	case !st.acted:
		return c.act(st)
	case st.respondAtEnd:
		st.respondAtEnd = false
		return false, c.respond(st)
	}
	c.release(st)
	return false, nil
}

func (c *conn) onClientReset(f *http2.RSTStreamFrame) {
	st := c.streams[f.StreamID]
	if st == nil {
		return
	}
	c.logf("stream %d: reset by the client (%v)", st.id, f.ErrCode)
	c.s.core.Update(func() {
		st.rec.ClientReset = true
		st.rec.ClientResetCode = f.ErrCode
		st.rec.Done = true
	})
	st.reading, st.sending, st.pending = false, false, nil
	c.release(st)
}

// act runs the stream's action.
func (c *conn) act(st *stream) (closed bool, err error) {
	st.acted = true
	a := st.action
	switch a.Kind {
	case replaysafetest.StreamRespond:
		return false, c.respond(st)
	case replaysafetest.StreamRefuse:
		return false, c.resetStream(st, http2.ErrCodeRefusedStream)
	case replaysafetest.StreamReset:
		return false, c.resetStream(st, a.Code)
	case replaysafetest.StreamGoAway:
		return c.goAwayFor(st)
	case replaysafetest.StreamClose:
		c.logf("stream %d: closing the connection (%v)", st.id, a.CloseMode)
		c.closeWith(a.CloseMode)
		return true, nil
	case replaysafetest.StreamPartialHeaders:
		block := c.encodeResponse(a)
		half := block[:(len(block)+1)/2]
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: half}); err != nil {
			return false, err
		}
		c.logf("stream %d: sent %d of %d header block bytes without END_HEADERS; closing (%v)", st.id, len(half), len(block), a.CloseMode)
		c.closeWith(a.CloseMode)
		return true, nil
	case replaysafetest.StreamHang:
		d := a.Delay
		if d <= 0 {
			d = c.s.cfg.HangTimeout
		}
		if until := time.Now().Add(d); c.hangUntil.IsZero() || until.Before(c.hangUntil) {
			c.hangUntil, c.hangMode = until, a.CloseMode
		}
		return false, nil
	}
	// A script with an invalid kind is the test author's mistake; say so
	// on the wire rather than guess.
	c.logf("stream %d: invalid action %v: resetting with INTERNAL_ERROR", st.id, a.Kind)
	return false, c.resetStream(st, http2.ErrCodeInternal)
}

// resetStream sends RST_STREAM and forgets the stream.
func (c *conn) resetStream(st *stream, code http2.ErrCode) error {
	if err := c.fr.WriteRSTStream(st.id, code); err != nil {
		return err
	}
	c.logf("stream %d: reset with %v", st.id, code)
	c.stop(st)
	return nil
}

// stop ends the server's interest in a stream: it reads and sends no more.
func (c *conn) stop(st *stream) {
	st.reading, st.sending, st.pending, st.respondAtEnd = false, false, nil, false
	c.s.core.Update(func() { st.rec.Done = true })
	c.release(st)
}

// release forgets a stream the server neither reads nor answers any more.
func (c *conn) release(st *stream) {
	if !st.reading && !st.sending && !st.respondAtEnd {
		delete(c.streams, st.id)
	}
}

func (c *conn) goAwayFor(st *stream) (bool, error) {
	a := st.action
	last, err := c.writeGoAway(a.LastStream.resolve(st.id), a.Code, a.DebugData)
	if err != nil {
		return false, err
	}
	if a.Close {
		c.closeWith(a.CloseMode)
		return true, nil
	}
	// Streams above the last stream ID are never processed: stop reading
	// them. Those at or below it carry on.
	for _, id := range kit.SortedKeys(c.streams) {
		if id > last {
			c.stop(c.streams[id])
		}
	}
	if st.id > last {
		return false, nil
	}
	if st.reading {
		st.respondAtEnd = true
		return false, nil
	}
	return false, c.respond(st)
}

// writeGoAway sends GOAWAY(last, code), lowered to an earlier GOAWAY's
// last stream ID, records it and returns the ID sent.
func (c *conn) writeGoAway(last uint32, code http2.ErrCode, debug []byte) (uint32, error) {
	if c.goAway && last > c.goAwayLast {
		last = c.goAwayLast // a later GOAWAY must not raise the last stream ID (RFC 9113 §6.8)
	}
	if err := c.fr.WriteGoAway(last, code, debug); err != nil {
		return last, err
	}
	c.goAway, c.goAwayLast = true, last
	c.s.core.Update(func() {
		c.rec.info.GoAwaySent = true
		c.rec.info.GoAwayLast = last
		c.rec.info.GoAwayCode = code
	})
	c.logf("sent GOAWAY last=%d code=%v", last, code)
	return last, nil
}

// respond sends the response of the stream's action: HEADERS, then the
// body as flow control allows, then any trailers.
func (c *conn) respond(st *stream) error {
	a := st.action
	block := c.encodeResponse(a)
	hasBody, hasTrailer := len(a.Body) > 0, len(a.Trailer) > 0
	if err := c.writeBlock(st.id, block, !hasBody && !hasTrailer); err != nil {
		return err
	}
	if !hasBody && !hasTrailer {
		c.release(st)
		return nil
	}
	st.sending, st.pending, st.trailer = true, a.Body, a.Trailer
	return c.send(st)
}

// send writes as much of the pending body as the windows allow, then the
// trailers. It returns early, with the rest pending, when a window is
// exhausted; a WINDOW_UPDATE calls it again.
func (c *conn) send(st *stream) error {
	for len(st.pending) > 0 { // each pass sends at least one byte or returns
		n := int64(min(len(st.pending), c.maxFrame))
		n = min(n, c.connWindow, st.window)
		if n <= 0 {
			return nil
		}
		end := int(n) == len(st.pending) && len(st.trailer) == 0
		if err := c.fr.WriteData(st.id, end, st.pending[:n]); err != nil {
			return err
		}
		c.connWindow -= n
		st.window -= n
		st.pending = st.pending[n:]
	}
	if len(st.trailer) > 0 {
		if err := c.writeBlock(st.id, c.encodeFields(st.trailer), true); err != nil {
			return err
		}
		st.trailer = nil
	}
	st.sending = false
	c.release(st)
	return nil
}

// sendAll resumes every response waiting for flow control, in stream
// order.
func (c *conn) sendAll() error {
	for _, id := range kit.SortedKeys(c.streams) {
		if st := c.streams[id]; st != nil && st.sending {
			if err := c.send(st); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeBlock writes a header block as one HEADERS frame and as many
// CONTINUATION frames as the client's maximum frame size requires.
func (c *conn) writeBlock(id uint32, block []byte, endStream bool) error {
	first := true
	for first || len(block) > 0 { // each pass consumes up to maxFrame bytes
		chunk := block[:min(len(block), c.maxFrame)]
		block = block[len(chunk):]
		endHeaders := len(block) == 0
		var err error
		if first {
			err = c.fr.WriteHeaders(http2.HeadersFrameParam{
				StreamID:      id,
				BlockFragment: chunk,
				EndStream:     endStream,
				EndHeaders:    endHeaders,
			})
			first = false
		} else {
			err = c.fr.WriteContinuation(id, endHeaders, chunk)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// encodeResponse returns the HPACK block of the action's response header
// section: :status, then the header fields in sorted order, with
// content-length added unless the action sets it.
func (c *conn) encodeResponse(a Action) []byte {
	c.hbuf.Reset()
	c.writeField(":status", strconv.Itoa(a.status()))
	c.writeHeader(a.Header)
	if a.Header.Get("Content-Length") == "" {
		c.writeField("content-length", strconv.Itoa(len(a.Body)))
	}
	return bytes.Clone(c.hbuf.Bytes())
}

// encodeInformational returns the HPACK block of an interim response.
func (c *conn) encodeInformational(inf Informational) []byte {
	c.hbuf.Reset()
	c.writeField(":status", strconv.Itoa(inf.Status))
	c.writeHeader(inf.Header)
	return bytes.Clone(c.hbuf.Bytes())
}

// encodeFields returns the HPACK block of a trailer section.
func (c *conn) encodeFields(h http.Header) []byte {
	c.hbuf.Reset()
	c.writeHeader(h)
	return bytes.Clone(c.hbuf.Bytes())
}

func (c *conn) writeHeader(h http.Header) {
	for k, v := range kit.SortedFields(h) {
		c.writeField(strings.ToLower(k), v)
	}
}

func (c *conn) writeField(name, value string) {
	// Encoding into a bytes.Buffer cannot fail.
	_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: value})
}
