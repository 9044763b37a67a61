package h3server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// errStopped says the server stopped reading a stream on purpose.
var errStopped = errors.New("the server stopped reading the stream")

// stream is the server's state for one request stream. One goroutine
// (serveStream) owns it; other goroutines of the connection may only
// reset it or stop reading it, through the methods guarded by mu.
type stream struct {
	c   *conn
	str *quic.Stream
	id  uint64
	rec *Received         // set before the stream is registered on its conn
	r   quicvarint.Reader // reads str through Read, with deadlines

	mu      sync.Mutex
	stopped bool          // the server reads this stream no more
	reset   bool          // the server reset it: it sends nothing more
	stop    chan struct{} // closed when stopped becomes true

	// Owned by the stream's goroutine.
	acted        bool      // the action has run
	answered     bool      // a final response was written (or attempted)
	respondAtEnd bool      // answer once the request is complete (a GOAWAY that spares it)
	trailers     bool      // the request trailers arrived
	hangUntil    time.Time // when a hang closes the connection
	hangCode     http3.ErrCode
}

func (st *stream) logf(format string, args ...any) {
	st.c.logf("stream %d: "+format, append([]any{st.id}, args...)...)
}

// serveStream reads one request stream's HEADERS, records it and carries
// out its action.
func (c *conn) serveStream(str *quic.Stream) {
	defer c.wg.Done()
	st := &stream{c: c, str: str, id: uint64(str.StreamID()), stop: make(chan struct{})}
	st.r = quicvarint.NewReader(st)
	fields, err := st.readHeaders()
	if err != nil {
		st.abandon(err)
		return
	}
	rec := newReceived(c.idx, st.id, fields)
	st.rec = rec
	a, ignored, drop := c.register(st)
	c.s.core.Update(func() {
		c.s.core.Reqs = append(c.s.core.Reqs, rec)
		c.rec.info.Streams++
	})
	if ignored {
		if drop {
			st.logf("(seq %d) %s %s: dropped, at or above the GOAWAY sent", rec.Seq, rec.Method, rec.Path)
			st.stopReading()
		} else {
			st.logf("(seq %d) %s %s: rejected, at or above the GOAWAY sent", rec.Seq, rec.Method, rec.Path)
			st.resetWith(http3.ErrCodeRequestRejected)
		}
		return
	}
	defer c.forget(st)
	st.logf("(seq %d) %s %s -> %v", rec.Seq, rec.Method, rec.Path, a)
	st.run(a)
	st.markDone()
	st.waitHang()
}

// run carries out the action around the reading of the request body.
func (st *stream) run(a Action) {
	for _, inf := range a.Informational {
		if err := st.writeFields(encodeResponse(inf.Status, inf.Header, -1)); err != nil {
			st.logf("writing informational %d: %v", inf.Status, err)
			return
		}
	}
	if a.Endless1xx != 0 {
		st.flood(a)
		return
	}
	if a.At == OnHeaders && !st.act(a) {
		return
	}
	if a.Stall > 0 {
		st.logf("stalling for %v before reading the body", a.Stall)
		if !st.c.sleep(a.Stall, st.stop) {
			return
		}
	}
	if !st.readBody() || st.isStopped() {
		return
	}
	switch {
	case !st.acted:
		st.act(a)
	case st.respondAtEnd:
		st.respond(a)
	}
}

// flood sends interim responses with status a.Endless1xx within the
// bounds of Action.Endless1xx.
func (st *stream) flood(a Action) {
	frame := appendFrame(nil, frameHeaders, encodeResponse(a.Endless1xx, a.Header, -1))
	deadline := time.Now().Add(EndlessMaxDuration)
	n := 0
	for ; n < EndlessMaxResponses && time.Now().Before(deadline); n++ {
		if st.isStopped() {
			break
		}
		if err := st.write(frame); err != nil {
			st.logf("interim flood ends after %d: %v", n, err)
			return
		}
	}
	st.logf("sent %d interim %d responses", n, a.Endless1xx)
	st.c.close(http3.ErrCodeNoError, "h3server: interim flood over")
}

// act runs the stream's action and reports whether the server goes on
// reading the request.
func (st *stream) act(a Action) (keepReading bool) {
	st.acted = true
	switch a.Kind {
	case replaysafetest.StreamRespond:
		st.respond(a)
		return true
	case replaysafetest.StreamRefuse:
		st.resetWith(http3.ErrCodeRequestRejected)
		return false
	case replaysafetest.StreamReset:
		st.resetWith(a.code())
		return false
	case replaysafetest.StreamGoAway:
		return st.goAway(a)
	case replaysafetest.StreamClose:
		st.c.close(a.code(), fmt.Sprintf("h3server: closed on stream %d", st.id))
		return false
	case replaysafetest.StreamStopSending:
		if a.NoResponse {
			st.startHang(a.Delay, http3.ErrCodeNoError)
		} else {
			st.respond(a)
		}
		st.logf("sending STOP_SENDING(%v)", a.code())
		st.mu.Lock()
		st.stopLocked()
		st.str.CancelRead(quic.StreamErrorCode(a.code()))
		st.mu.Unlock()
		return false
	case replaysafetest.StreamHang:
		st.startHang(a.Delay, a.code())
		return true
	}
	// A script with an invalid kind is the test author's mistake; say so
	// on the wire rather than guess.
	st.logf("invalid action %v: resetting with H3_INTERNAL_ERROR", a.Kind)
	st.resetWith(http3.ErrCodeInternalError)
	return false
}

// goAway runs a StreamGoAway action.
func (st *stream) goAway(a Action) (keepReading bool) {
	id, err := st.c.sendGoAway(st, a)
	if err != nil {
		st.logf("%v", err)
		return false
	}
	if a.Close {
		d := a.Delay
		if d == 0 {
			d = DefaultGoAwayCloseDelay
		}
		if d > 0 {
			st.c.sleep(d, nil)
		}
		st.c.close(a.code(), fmt.Sprintf("h3server: closed after GOAWAY %d", id))
		return false
	}
	if st.id >= id { // rejected or dropped by sendGoAway
		return false
	}
	if a.At == AfterBody {
		st.respond(a)
		return true
	}
	st.respondAtEnd = true
	return true
}

// startHang makes the stream close its connection with code once d (zero:
// Config.HangTimeout) has passed, unless an earlier hang is due sooner.
func (st *stream) startHang(d time.Duration, code http3.ErrCode) {
	if d <= 0 {
		d = st.c.s.cfg.HangTimeout
	}
	if until := time.Now().Add(d); st.hangUntil.IsZero() || until.Before(st.hangUntil) {
		st.hangUntil, st.hangCode = until, code
	}
}

// waitHang waits for the end of a hang, then closes the connection.
func (st *stream) waitHang() {
	if st.hangUntil.IsZero() {
		return
	}
	if st.c.sleep(time.Until(st.hangUntil), nil) {
		st.c.close(st.hangCode, fmt.Sprintf("h3server: hang on stream %d over", st.id))
	}
}

// Read reads the stream with a deadline: Config.IdleTimeout from now, or
// the end of a hang if sooner. It fails with errStopped once the server
// stopped reading the stream.
func (st *stream) Read(p []byte) (int, error) {
	deadline := time.Now().Add(st.c.s.cfg.IdleTimeout)
	if !st.hangUntil.IsZero() && st.hangUntil.Before(deadline) {
		deadline = st.hangUntil
	}
	st.mu.Lock()
	if st.stopped {
		st.mu.Unlock()
		return 0, errStopped
	}
	err := st.str.SetReadDeadline(deadline)
	st.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return st.str.Read(p)
}

func (st *stream) isStopped() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.stopped
}

// stopLocked marks the stream as no longer read; the caller holds st.mu.
func (st *stream) stopLocked() {
	if !st.stopped {
		st.stopped = true
		close(st.stop)
	}
}

// stopReading stops reading the stream without telling the client: a
// Read under way returns at once.
func (st *stream) stopReading() {
	st.mu.Lock()
	st.stopLocked()
	_ = st.str.SetReadDeadline(time.Now()) // never fails on a quic.Stream
	st.mu.Unlock()
	st.markDone()
}

// resetWith resets the stream in both directions with code
// (RESET_STREAM, and STOP_SENDING unless the request is complete). Any
// goroutine of the connection may call it.
func (st *stream) resetWith(code http3.ErrCode) {
	st.mu.Lock()
	if st.reset {
		st.mu.Unlock()
		return
	}
	st.reset = true
	st.stopLocked()
	st.str.CancelWrite(quic.StreamErrorCode(code))
	st.str.CancelRead(quic.StreamErrorCode(code))
	st.mu.Unlock()
	st.logf("reset with %v", code)
	st.c.s.core.Update(func() {
		st.rec.ServerReset = true
		st.rec.ServerResetCode = code
		st.rec.Done = true
	})
}

func (st *stream) markDone() {
	st.c.s.core.Update(func() { st.rec.Done = true })
}

// abandon handles a stream whose HEADERS never arrived: it is not
// recorded.
func (st *stream) abandon(err error) {
	var se *quic.StreamError
	switch {
	case errors.As(err, &se) && se.Remote:
		st.logf("reset by the client (%v) before its HEADERS", http3.ErrCode(se.ErrorCode))
	case errors.Is(err, io.EOF):
		st.logf("ended before its HEADERS")
		st.str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestIncomplete))
	case st.c.qc.Context().Err() != nil:
		st.logf("connection over before its HEADERS")
	default:
		code := http3.ErrCodeFrameError
		switch {
		case kit.IsTimeout(err):
			code = http3.ErrCodeRequestIncomplete
		case errors.Is(err, errDataBeforeHeaders):
			code = http3.ErrCodeFrameUnexpected
		case errors.Is(err, errQPACK):
			code = http3.ErrCodeQPACKDecompressionFailed
		}
		st.logf("no HEADERS: %v; resetting with %v", err, code)
		st.str.CancelWrite(quic.StreamErrorCode(code))
		st.str.CancelRead(quic.StreamErrorCode(code))
	}
}

var (
	errDataBeforeHeaders = errors.New("DATA frame before HEADERS")
	errQPACK             = errors.New("QPACK")
)

// readHeaders reads frames up to the request's HEADERS frame, skipping
// frames of unknown types, and decodes its field section.
func (st *stream) readHeaders() ([]qpack.HeaderField, error) {
	for { // each pass consumes a frame; Read deadlines bound the loop
		h, err := readFrameHeader(st.r)
		if err != nil {
			return nil, err
		}
		switch h.Type {
		case frameHeaders:
			p, err := readPayload(st.r, h, maxFieldSection)
			if err != nil {
				return nil, err
			}
			return decodeFields(p)
		case frameData:
			return nil, errDataBeforeHeaders
		}
		if err := st.skip(h); err != nil {
			return nil, err
		}
	}
}

func (st *stream) skip(h frameHeader) error {
	st.logf("skipping a frame of type %#x, %d bytes", h.Type, h.Length)
	_, err := io.CopyN(io.Discard, st.r, int64(h.Length))
	return truncated(err)
}

// readBody reads and records DATA frames and trailers until the FIN; it
// reports whether the FIN arrived.
func (st *stream) readBody() (fin bool) {
	buf := make([]byte, readChunk)
	for { // each pass consumes a frame; Read deadlines bound the loop
		h, err := readFrameHeader(st.r)
		if errors.Is(err, io.EOF) {
			// Done waits for the action: it may still record a reset.
			st.c.s.core.Update(func() { st.rec.FIN, st.rec.FINAt = true, time.Now() })
			return true
		}
		if err != nil {
			st.readFailed(err)
			return false
		}
		switch {
		case h.Type == frameData && !st.trailers:
			for left := h.Length; left > 0; { // each pass reads at least a byte or fails
				n, err := st.r.Read(buf[:min(left, uint64(len(buf)))])
				left -= uint64(n)
				st.recordBody(buf[:n])
				if err != nil && (left > 0 || !errors.Is(err, io.EOF)) {
					st.readFailed(truncated(err))
					return false
				}
			}
		case h.Type == frameHeaders && !st.trailers:
			p, err := readPayload(st.r, h, maxFieldSection)
			if err == nil {
				var fields []qpack.HeaderField
				if fields, err = decodeFields(p); err == nil {
					st.trailers = true
					st.recordTrailer(fields)
					continue
				}
			}
			st.readFailed(fmt.Errorf("request trailers: %w", err))
			return false
		case h.Type == frameData || h.Type == frameHeaders:
			st.readFailed(fmt.Errorf("frame type %#x after the trailers", h.Type))
			return false
		default:
			if err := st.skip(h); err != nil {
				st.readFailed(err)
				return false
			}
		}
	}
}

func (st *stream) recordBody(p []byte) {
	if len(p) == 0 {
		return
	}
	limit := st.c.s.cfg.MaxBodyBytes
	st.c.s.core.Update(func() {
		take := min(len(p), limit-len(st.rec.Body))
		st.rec.Body = append(st.rec.Body, p[:take]...)
		st.rec.BodyDropped += int64(len(p) - take)
	})
}

func (st *stream) recordTrailer(fields []qpack.HeaderField) {
	trailer := make(http.Header)
	for _, f := range fields {
		if !f.IsPseudo() {
			trailer.Add(f.Name, f.Value)
		}
	}
	st.c.s.core.Update(func() { st.rec.Trailer = trailer })
}

// readFailed records why reading the request ended before its FIN and,
// when the fault is the request's, resets the stream.
func (st *stream) readFailed(err error) {
	var se *quic.StreamError
	var reason string
	var code http3.ErrCode
	switch {
	case st.isStopped():
		// The server stopped reading on purpose; the action says why.
	case errors.As(err, &se) && se.Remote:
		st.logf("reset by the client (%v)", http3.ErrCode(se.ErrorCode))
		st.c.s.core.Update(func() {
			st.rec.ClientReset = true
			st.rec.ClientResetCode = http3.ErrCode(se.ErrorCode)
		})
	case st.c.qc.Context().Err() != nil:
		reason = "connection over"
	case kit.IsTimeout(err):
		if !st.hangUntil.IsZero() && !time.Now().Before(st.hangUntil) {
			break // the hang is over; waitHang closes the connection
		}
		reason, code = "idle timeout", http3.ErrCodeRequestIncomplete
	case errors.Is(err, errQPACK):
		reason, code = err.Error(), http3.ErrCodeQPACKDecompressionFailed
	default:
		reason, code = err.Error(), http3.ErrCodeFrameError
	}
	if reason != "" {
		st.logf("stopped reading: %s", reason)
		st.c.s.core.Update(func() {
			if st.rec.Err == "" {
				st.rec.Err = reason
			}
		})
	}
	if code != 0 {
		st.resetWith(code)
	}
}

// respond sends the final response of the action: HEADERS, the body in
// DATA frames, any trailers, then the FIN.
func (st *stream) respond(a Action) {
	if st.answered || st.isStopped() {
		return
	}
	st.answered = true
	if err := st.writeResponse(a); err != nil {
		st.logf("writing the response: %v", err)
		return
	}
	st.logf("answered %d with %d body bytes", a.status(), len(a.Body))
}

func (st *stream) writeResponse(a Action) error {
	cl := len(a.Body)
	if a.Header.Get("Content-Length") != "" {
		cl = -1 // the script's own, possibly false, value
	}
	if err := st.writeFields(encodeResponse(a.status(), a.Header, cl)); err != nil {
		return err
	}
	for body := a.Body; len(body) > 0; { // each pass writes up to maxDataFrame bytes
		chunk := body[:min(len(body), maxDataFrame)]
		body = body[len(chunk):]
		if err := st.write(appendFrame(nil, frameData, chunk)); err != nil {
			return err
		}
	}
	if len(a.Trailer) > 0 {
		if err := st.writeFields(encodeFields(a.Trailer)); err != nil {
			return err
		}
	}
	return st.str.Close()
}

// writeFields writes a HEADERS frame carrying an encoded field section.
func (st *stream) writeFields(section []byte) error {
	return st.write(appendFrame(nil, frameHeaders, section))
}

// write writes b on the stream within Config.WriteTimeout.
func (st *stream) write(b []byte) error {
	if err := st.str.SetWriteDeadline(time.Now().Add(st.c.s.cfg.WriteTimeout)); err != nil {
		return err
	}
	_, err := st.str.Write(b)
	return err
}

// newReceived records a request from its decoded field section.
func newReceived(connIdx int, id uint64, fields []qpack.HeaderField) *Received {
	p, h := kit.SplitFields(fields, func(f qpack.HeaderField) (string, string) { return f.Name, f.Value })
	return &Received{
		StreamRecord: replaysafetest.StreamRecord{Conn: connIdx, At: time.Now(), Header: h,
			Method: p.Method, Scheme: p.Scheme, Authority: p.Authority, Path: p.Path, Protocol: p.Protocol},
		Stream: id, Fields: fields,
	}
}

// decodeFields decodes a QPACK field section that uses the static table
// only.
func decodeFields(p []byte) ([]qpack.HeaderField, error) {
	next := qpack.NewDecoder().Decode(p)
	var out []qpack.HeaderField
	for { // each pass consumes at least a byte of p or fails
		f, err := next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errQPACK, err)
		}
		out = append(out, f)
	}
}

// encodeResponse returns the QPACK field section of a response: :status,
// then the header fields in sorted order, then content-length when
// contentLength is not negative.
func encodeResponse(status int, header http.Header, contentLength int) []byte {
	var buf bytes.Buffer
	enc := qpack.NewEncoder(&buf)
	// Encoding into a bytes.Buffer cannot fail.
	_ = enc.WriteField(qpack.HeaderField{Name: ":status", Value: strconv.Itoa(status)})
	encodeHeader(enc, header)
	if contentLength >= 0 {
		_ = enc.WriteField(qpack.HeaderField{Name: "content-length", Value: strconv.Itoa(contentLength)})
	}
	return buf.Bytes()
}

// encodeFields returns the QPACK field section of a trailer section.
func encodeFields(h http.Header) []byte {
	var buf bytes.Buffer
	encodeHeader(qpack.NewEncoder(&buf), h)
	return buf.Bytes()
}

func encodeHeader(enc *qpack.Encoder, h http.Header) {
	for k, v := range kit.SortedFields(h) {
		_ = enc.WriteField(qpack.HeaderField{Name: strings.ToLower(k), Value: v})
	}
}
