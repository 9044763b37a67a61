package h2server

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

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

// resolve returns the last stream ID for a GOAWAY sent while handling
// stream id.
func (l LastStream) resolve(id uint32) uint32 {
	if !l.Relative {
		return l.ID & (1<<31 - 1)
	}
	return uint32(kit.Offset(uint64(id), l.Delta, 1<<31-1))
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
