package h3server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// conn serves one accepted QUIC connection: one goroutine accepts request
// streams, one accepts unidirectional streams, and each stream gets a
// goroutine of its own. All of them end once the QUIC connection is
// closed, whoever closes it.
type conn struct {
	s      *Server
	rec    *connRecord
	idx    int
	qc     *quic.Conn
	script *ConnScript
	wg     sync.WaitGroup // the connection's stream goroutines
	done   chan struct{}  // closed once the connection is over and recorded

	ctrlMu sync.Mutex       // serializes writes on ctrl
	ctrl   *quic.SendStream // the server's control stream

	mu         sync.Mutex
	nextSeq    int                // Seq of the next request stream
	streams    map[uint64]*stream // request streams the server still handles
	goAway     bool               // the server sent a GOAWAY
	goAwayID   uint64             // the ID it carried
	goAwayDrop bool               // streams at or above it are dropped, not rejected
	clientCtrl bool               // the client's control stream arrived
}

func newConn(s *Server, rec *connRecord, qc *quic.Conn) *conn {
	return &conn{
		s:       s,
		rec:     rec,
		idx:     rec.info.Index,
		qc:      qc,
		script:  kit.ScriptFor(s.cfg.Conns, s.cfg.Default, rec.info.Index),
		done:    make(chan struct{}),
		streams: make(map[uint64]*stream),
	}
}

func (c *conn) logf(format string, args ...any) {
	c.s.core.Logf("conn %d: "+format, append([]any{c.idx}, args...)...)
}

// serve runs the connection until the QUIC connection ends.
func (c *conn) serve() {
	defer c.finish()
	if err := c.openControl(); err != nil {
		c.logf("opening the control stream: %v", err)
		c.close(http3.ErrCodeInternalError, "h3server: cannot open the control stream")
		return
	}
	c.wg.Add(1)
	go c.acceptUni()
	for {
		str, err := c.qc.AcceptStream(context.Background()) // fails once the connection is closed
		if err != nil {
			return
		}
		c.wg.Add(1)
		go c.serveStream(str)
	}
}

// openControl opens the server's control stream and sends SETTINGS: no
// QPACK dynamic table, then Config.Settings.
func (c *conn) openControl() error {
	str, err := c.qc.OpenUniStream()
	if err != nil {
		return err
	}
	c.ctrl = str
	settings := append([]Setting{
		{ID: settingQPACKMaxTableCapacity, Value: 0},
		{ID: settingQPACKBlockedStreams, Value: 0},
	}, c.s.cfg.Settings...)
	b := quicvarint.Append(nil, streamTypeControl)
	return c.writeControl(appendSettings(b, settings))
}

// writeControl writes b on the control stream.
func (c *conn) writeControl(b []byte) error {
	c.ctrlMu.Lock()
	defer c.ctrlMu.Unlock()
	if err := c.ctrl.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout)); err != nil {
		return err
	}
	_, err := c.ctrl.Write(b)
	return err
}

// close closes the connection with CONNECTION_CLOSE(code). It returns
// once quic-go has sent the frame and torn the connection down.
func (c *conn) close(code http3.ErrCode, reason string) {
	c.logf("closing the connection with %v (%s)", code, reason)
	c.qc.CloseWithError(quic.ApplicationErrorCode(code), reason)
}

// finish waits for the connection's goroutines and marks its records
// final.
func (c *conn) finish() {
	// AcceptStream failed, so the connection is closed (or failed to set
	// up, in which case it was closed above): every stream goroutine is
	// about to return.
	<-c.qc.Context().Done()
	c.wg.Wait()
	cause := context.Cause(c.qc.Context())
	stats := c.qc.ConnectionStats()
	c.s.core.Update(func() {
		info := &c.rec.info
		info.Closed = true
		info.BytesSent, info.BytesReceived = stats.BytesSent, stats.BytesReceived
		if cause != nil {
			info.Err = cause.Error()
		}
		if ae, ok := errors.AsType[*quic.ApplicationError](cause); ok {
			info.ClosedByClient = ae.Remote
			info.CloseCode = http3.ErrCode(ae.ErrorCode)
		}
		c.rec.conn = nil
	})
	c.logf("over: %v", cause)
	close(c.done)
	c.s.core.WG.Done()
}

// sleep waits for d, or until the connection ends or stop is closed; it
// reports whether d elapsed.
func (c *conn) sleep(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.qc.Context().Done():
	case <-stop:
	}
	return false
}

// acceptUni accepts the client's unidirectional streams until the
// connection ends.
func (c *conn) acceptUni() {
	defer c.wg.Done()
	for {
		str, err := c.qc.AcceptUniStream(context.Background())
		if err != nil {
			return
		}
		c.wg.Add(1)
		go c.serveUni(str)
	}
}

// serveUni reads one unidirectional stream: the client's control stream
// is parsed, QPACK streams are drained, anything else is refused with
// H3_STREAM_CREATION_ERROR. The server records; it does not police.
func (c *conn) serveUni(str *quic.ReceiveStream) {
	defer c.wg.Done()
	// The stream type must come with the stream; the rest of a control
	// stream may take the connection's whole life.
	if err := str.SetReadDeadline(time.Now().Add(c.s.cfg.IdleTimeout)); err != nil {
		return
	}
	r := quicvarint.NewReader(str)
	typ, err := quicvarint.Read(r)
	if err != nil {
		c.logf("unidirectional stream %d: reading its type: %v", str.StreamID(), err)
		return
	}
	if err := str.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	switch typ {
	case streamTypeControl:
		c.mu.Lock()
		first := !c.clientCtrl
		c.clientCtrl = true
		c.mu.Unlock()
		if !first {
			c.logf("unidirectional stream %d: a second control stream, ignored", str.StreamID())
			str.CancelRead(quic.StreamErrorCode(http3.ErrCodeStreamCreationError))
			return
		}
		c.readClientControl(r, str.StreamID())
	case streamTypeQPACKEncoder, streamTypeQPACKDecoder:
		// With a zero dynamic table both stay empty; drain them until the
		// connection ends.
		_, _ = io.Copy(io.Discard, str)
	default:
		c.logf("unidirectional stream %d: type %#x refused", str.StreamID(), typ)
		str.CancelRead(quic.StreamErrorCode(http3.ErrCodeStreamCreationError))
	}
}

// readClientControl records the client's SETTINGS and GOAWAY frames until
// the control stream or the connection ends.
func (c *conn) readClientControl(r quicvarint.Reader, id quic.StreamID) {
	// Each pass consumes a frame; the loop ends with the stream or the
	// connection.
	for first := true; ; first = false {
		h, err := readFrameHeader(r)
		if err != nil {
			if c.qc.Context().Err() == nil {
				c.logf("client control stream %d: %v", id, err)
			}
			return
		}
		var p []byte
		if h.Type == frameSettings || h.Type == frameGoAway {
			if p, err = readPayload(r, h, maxSettings); err != nil {
				c.logf("client control stream %d: %v", id, err)
				return
			}
		} else if _, err := io.CopyN(io.Discard, r, int64(h.Length)); err != nil {
			return
		}
		switch {
		case h.Type == frameSettings && first:
			settings, err := parseSettings(p)
			c.s.core.Update(func() {
				c.rec.info.SettingsReceived = true
				c.rec.info.Settings = settings
			})
			if err != nil {
				c.logf("client SETTINGS: %v", err)
			}
		case h.Type == frameGoAway:
			gid, err := parseGoAway(p)
			if err != nil {
				c.logf("client %v", err)
				continue
			}
			c.logf("client sent GOAWAY %d", gid)
			c.s.core.Update(func() {
				c.rec.info.ClientGoAway = true
				c.rec.info.ClientGoAwayID = gid
			})
		case first:
			c.logf("client control stream %d: first frame type %#x, not SETTINGS", id, h.Type)
		}
	}
}

// register classifies a request stream whose HEADERS arrived and whose
// record is made but not yet published: it gets the next Seq and its
// action, and is ignored when a GOAWAY already excludes its ID.
func (c *conn) register(st *stream) (a Action, ignored, drop bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.rec.Seq = c.nextSeq
	c.nextSeq++
	a = c.script.Nth(st.rec.Seq, OK("ok"))
	st.rec.Action = a.Kind
	if c.goAway && st.id >= c.goAwayID {
		st.rec.Ignored = true
		return a, true, c.goAwayDrop
	}
	c.streams[st.id] = st
	return a, false, false
}

// forget drops a request stream the server has finished with.
func (c *conn) forget(st *stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.streams, st.id)
}

// sendGoAway sends GOAWAY carrying the action's ID resolved for stream st
// (never above a previous GOAWAY's, RFC 9114 §5.2) and, unless the
// connection is about to close, rejects or drops every stream at or above
// it, st included. It returns the ID sent.
func (c *conn) sendGoAway(st *stream, a Action) (uint64, error) {
	c.mu.Lock()
	id := a.GoAwayID.resolve(st.id)
	if c.goAway && id > c.goAwayID {
		id = c.goAwayID
	}
	c.goAway, c.goAwayID, c.goAwayDrop = true, id, a.Drop
	var above []*stream
	for _, sid := range kit.SortedKeys(c.streams) {
		if sid >= id {
			above = append(above, c.streams[sid])
		}
	}
	c.mu.Unlock()

	p := quicvarint.Append(nil, id)
	if err := c.writeControl(appendFrame(nil, frameGoAway, p)); err != nil {
		return id, fmt.Errorf("writing GOAWAY: %w", err)
	}
	c.s.core.Update(func() {
		c.rec.info.GoAwaySent = true
		c.rec.info.GoAwayID = id
	})
	c.logf("stream %d: sent GOAWAY %d", st.id, id)
	if a.Close {
		return id, nil
	}
	for _, v := range above {
		if a.Drop {
			c.logf("stream %d: dropped, at or above GOAWAY %d", v.id, id)
			v.stopReading()
		} else {
			v.resetWith(http3.ErrCodeRequestRejected)
		}
	}
	return id, nil
}
