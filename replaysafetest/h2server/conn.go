package h2server

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

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
