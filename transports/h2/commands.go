package h2

// Commands to the machine: what the caller of a ClientConn asks for
// (open a stream, send body, read body, reset, ping, shut down), what
// the writer reports, and time.

import (
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

var errIDsExhausted = errors.New("h2: stream identifiers exhausted")

// start opens st if it may open now: it then allocates its stream ID
// and queues its HEADERS. Otherwise it either reports that st must wait
// (for a slot, or for the server's SETTINGS before an extended CONNECT)
// and keeps it in the waiting list, or fails. st holds a reservation;
// start consumes it unless it reports waiting.
func (m *machine) start(now time.Time, st *stream) (waiting bool, err error) {
	if !st.waiting && m.reserved == 0 {
		return false, &UnsentError{Cause: ErrNotReserved}
	}
	ready, err := m.admit(st)
	if err == nil && !ready {
		if !st.waiting {
			st.waiting = true
			m.waiting = append(m.waiting, st)
		}
		return true, nil
	}
	m.leaveWaiting(st)
	m.reserved--
	if err != nil {
		m.maybeFinish(now)
		return false, err
	}
	m.open(now, st)
	return false, nil
}

// admit reports whether st may open now, or why it never will.
func (m *machine) admit(st *stream) (bool, error) {
	switch {
	case m.closed:
		return false, &UnsentError{Cause: m.err}
	case m.goAwayRecv:
		e := m.goAway
		return false, &UnsentError{Cause: &e}
	case m.goAwaySent:
		return false, &UnsentError{Cause: ErrShutdown}
	case st.head.size > uint64(m.cfg.maxHeaderList):
		return false, &RequestError{Reason: "request header list larger than MaxHeaderListSize"}
	}
	if st.head.extended {
		if !m.settled {
			return false, nil // §4 of RFC 8441: the server must have enabled it
		}
		if !m.peerExtConnect {
			return false, &UnsentError{Cause: ErrExtendedConnectUnsupported}
		}
	}
	switch {
	case m.peerMaxHeaderList != 0 && st.head.size > uint64(m.peerMaxHeaderList):
		return false, &RequestError{Reason: "request header list larger than the server's SETTINGS_MAX_HEADER_LIST_SIZE " + itoa(m.peerMaxHeaderList)}
	case m.nextID > maxStreamID:
		return false, &UnsentError{Cause: errIDsExhausted}
	case m.active >= m.limit():
		return false, nil // §5.1.2
	}
	return true, nil
}

func (m *machine) leaveWaiting(st *stream) {
	if !st.waiting {
		return
	}
	st.waiting = false
	for i, w := range m.waiting {
		if w == st {
			m.waiting = append(m.waiting[:i], m.waiting[i+1:]...)
			break
		}
	}
}

// abandon gives up a stream still waiting to open, and its reservation.
func (m *machine) abandon(now time.Time, st *stream) {
	if st.waiting {
		m.leaveWaiting(st)
		m.reserved--
		m.maybeFinish(now)
	}
}

// open allocates st's ID and queues its HEADERS (with END_STREAM when
// nothing follows).
func (m *machine) open(now time.Time, st *stream) {
	st.id = m.nextID
	m.nextID += 2
	st.open = true
	m.streams[st.id] = st
	m.active++
	if m.active == 1 {
		m.busySince, m.idleSince = now, time.Time{}
	}
	st.sendWindow = m.peerInitWindow
	st.recvWindow = int32(m.cfg.streamWindow)
	st.contentLength = -1
	upload := st.head.hasBody() || len(st.req.Trailer) > 0
	m.hbuf.b = m.hbuf.b[:0]
	encodeRequest(m.henc, &st.head, st.req)
	m.out.headerBlock(st, m.hbuf.b, !upload, int(m.peerMaxFrame), recHeaders)
	if cap(m.hbuf.b) > 64<<10 {
		m.hbuf.b = nil // a huge header section does not pin its buffer
	}
	st.hdrBatch = m.outSeq
	st.endInHeader, st.localEnded, st.uploading = !upload, !upload, upload
}

// sendBody queues up to len(p) bytes of st's request body as DATA, with
// END_STREAM on the last frame if end and all of p fits. It returns how
// many bytes it queued and whether the rest must wait (for the server's
// SETTINGS, flow-control window, or the writer to drain); err says the
// upload must stop (errUploadStopped: quietly).
func (m *machine) sendBody(now time.Time, st *stream, p []byte, end bool) (n int, wait bool, err error) {
	return m.sendBodyUpTo(now, st, p, end, uploadQueueBytes)
}

// sendBodyUpTo is sendBody with queue as the bound on the frames waiting
// for the writer (earlyQueueBytes for a small body RoundTrip read
// itself, so that many of them can leave in one write).
func (m *machine) sendBodyUpTo(now time.Time, st *stream, p []byte, end bool, queue int) (n int, wait bool, err error) {
	if err := m.uploadStopped(st); err != nil {
		return 0, false, err
	}
	if !m.settled {
		return 0, true, nil // choice 24: no request body before the server's SETTINGS
	}
	for { // each pass queues one frame or stops
		if len(m.out.buf) >= queue {
			m.uploadsWaitQueue = true
			break
		}
		rem := p[n:]
		k := int(max(min(int64(len(rem)), st.sendWindow, m.sendWindow, int64(m.peerMaxFrame)), 0))
		last := end && k == len(rem)
		if k == 0 && !last {
			if m.sendWindow <= 0 {
				m.uploadsWaitWindow = true // a connection WINDOW_UPDATE must wake the uploads
			}
			break
		}
		m.out.data(st, rem[:k], last)
		st.sendWindow -= int64(k)
		m.sendWindow -= int64(k)
		n += k
		if last {
			st.localEnded = true
			m.maybeClose(now, st)
			return n, false, nil
		}
	}
	return n, n < len(p) || end, nil
}

// uploadStopped returns why st's upload cannot go on, or nil.
func (m *machine) uploadStopped(st *stream) error {
	switch {
	case st.stopUpload != nil:
		return st.stopUpload
	case !st.open || m.closed:
		return errUploadStopped
	}
	return nil
}

// sendTrailers queues st's trailer section with END_STREAM.
func (m *machine) sendTrailers(now time.Time, st *stream, trailer http.Header) (wait bool, err error) {
	if err := m.uploadStopped(st); err != nil {
		return false, err
	}
	if !m.settled || len(m.out.buf) >= uploadQueueBytes {
		if m.settled {
			m.uploadsWaitQueue = true
		}
		return true, nil
	}
	if err := validTrailer(trailer); err != nil {
		m.bodyFailed(now, st, err)
		return false, err
	}
	var size uint64
	for k, vv := range trailer {
		for _, v := range vv {
			size += fieldSize(k, v)
		}
	}
	if m.peerMaxHeaderList != 0 && size > uint64(m.peerMaxHeaderList) {
		err := &RequestError{Reason: "request trailer larger than the server's SETTINGS_MAX_HEADER_LIST_SIZE"}
		m.bodyFailed(now, st, err)
		return false, err
	}
	m.hbuf.b = m.hbuf.b[:0]
	encodeTrailer(m.henc, trailer)
	m.out.headerBlock(st, m.hbuf.b, true, int(m.peerMaxFrame), recEnd)
	st.localEnded = true
	m.maybeClose(now, st)
	return false, nil
}

// uploadDone records that st's upload has ended.
func (m *machine) uploadDone(st *stream) { st.uploading = false }

// bodyFailed resets st because its request body failed with err.
func (m *machine) bodyFailed(now time.Time, st *stream, err error) {
	if !st.open {
		return
	}
	m.sendReset(st, http2.ErrCodeCancel)
	m.failStream(st, &RequestBodyError{Err: err})
	m.maybeClose(now, st)
}

// cancel ends st on the caller's behalf (its context ended): RST_STREAM
// CANCEL if it is open; err becomes its error.
func (m *machine) cancel(now time.Time, st *stream, err error) {
	if st.waiting {
		m.abandon(now, st)
		m.failStream(st, &UnsentError{Cause: err})
		return
	}
	if !st.open {
		if st.err == nil && st.phase != respDone {
			m.failStream(st, err)
		}
		return
	}
	m.sendReset(st, http2.ErrCodeCancel)
	m.failStream(st, err)
	m.stopUploading(st, err)
	m.maybeClose(now, st)
}

// readBody moves buffered response body into p. It returns wait when
// nothing is buffered yet and the body is not over.
func (m *machine) readBody(st *stream, p []byte) (n int, err error, wait bool) {
	switch {
	case st.bodyClosed:
		return 0, ErrBodyClosed, false
	case st.buf.n > 0:
		if len(p) == 0 {
			return 0, nil, false
		}
		n = st.buf.read(p)
		m.creditStream(st, int64(n))
		m.creditConn(int64(n))
		return n, nil, false
	case st.err != nil:
		return 0, st.err, false
	case st.phase == respDone && st.localEnded && !st.endVerdict && !st.reset && !m.closed:
		// The response is complete but the writer has not reported on
		// our END_STREAM frame: the caller sees the body's end after
		// RequestWritten (or its absence), so that the exchange's events
		// come in the order that decides whether it ended cleanly.
		return 0, nil, true
	case st.phase == respDone:
		return 0, io.EOF, false
	}
	return 0, nil, true
}

// closeBody releases st's response body: unread bytes are returned to
// the connection window, and a response not yet complete is reset with
// CANCEL.
func (m *machine) closeBody(now time.Time, st *stream) {
	if st.bodyClosed {
		return
	}
	st.bodyClosed = true
	if dropped := st.buf.free(); dropped > 0 {
		m.creditConn(int64(dropped))
	}
	if st.open && st.phase != respDone {
		m.sendReset(st, http2.ErrCodeCancel)
		m.failStream(st, ErrBodyClosed)
		m.stopUploading(st, errUploadStopped)
		m.maybeClose(now, st)
	}
}

// discardBody drops st's response body without resetting the stream:
// whatever DATA still comes is credited back and dropped.
func (m *machine) discardBody(st *stream) {
	st.bodyClosed = true
	if dropped := st.buf.free(); dropped > 0 {
		m.creditConn(int64(dropped))
	}
}

// creditConn returns n consumed (or discarded) bytes to the server's
// connection window, with a WINDOW_UPDATE once a quarter of the window
// has accumulated.
func (m *machine) creditConn(n int64) {
	m.connUnacked += n
	if m.closed || m.connUnacked < m.cfg.connWindow/4 {
		return
	}
	m.out.windowUpdate(0, uint32(m.connUnacked))
	m.recvWindow += m.connUnacked
	m.connUnacked = 0
}

// creditStream returns n consumed bytes to st's window while the server
// may still send on it.
func (m *machine) creditStream(st *stream, n int64) {
	if !st.open || st.phase == respDone || m.closed {
		return
	}
	st.unacked += int32(n)
	if int64(st.unacked) < m.cfg.streamWindow/4 {
		return
	}
	m.out.windowUpdate(st.id, uint32(st.unacked))
	st.recvWindow += st.unacked
	st.unacked = 0
}

// take hands the queued frames to the writer: it swaps out with *dst
// (which must be empty) and reports whether there was anything.
func (m *machine) take(dst *outBuf) bool {
	if len(m.out.buf) == 0 {
		return false
	}
	m.out, *dst = *dst, m.out
	m.flight, m.flightSeq = true, m.outSeq
	m.outSeq++
	m.outControl = 0
	if m.uploadsWaitQueue {
		m.uploadsWaitQueue = false
		for _, st := range m.streams {
			if st.uploading {
				wake(st.wakeSend)
			}
		}
	}
	return true
}

// written reports a write of the batch take handed out: n bytes were
// accepted, then err (nil if all were). It delivers the evidence of the
// streams whose frames were (partly) written and, on error, ends the
// connection.
func (m *machine) written(now time.Time, b *outBuf, n int, err error) {
	m.flight = false
	for _, r := range b.recs {
		st := r.st
		if r.off < n {
			if r.kind == recHeaders && !st.headersLeft {
				st.headersLeft = true
				if st.live() {
					st.ev.HeadersWritten(st.id)
				}
			}
			if r.kind == recData {
				if k := min(n, r.end) - (r.off + frameHeaderLen); k > 0 && st.live() {
					st.ev.BodyWritten(int64(k))
				}
			}
			if r.endSt && r.end <= n && !st.endLeft {
				st.endLeft = true
				if st.live() {
					st.ev.RequestWritten()
				}
			}
		}
		if r.endSt && !st.endVerdict {
			st.endVerdict = true
			delete(m.endDue, st)
			wake(st.wakeResp) // a body's end waiting for this report
		}
		if r.endSt && !st.open && st.err == nil {
			st.quiet = true // the stream ended before this report
		}
		if r.kind == recHeaders && st.deferred {
			st.deferred = false
			if st.headersLeft {
				m.failStream(st, m.streamConnErr(st))
			} else {
				m.failStream(st, &UnsentError{Cause: m.err})
			}
		}
	}
	if err != nil && !m.closed {
		m.fail(now, &WriteError{Err: err}, endNow)
	}
}

// deadline returns when tick must next run, if ever.
func (m *machine) deadline() (time.Time, bool) {
	var d time.Time
	if m.closed {
		return d, false
	}
	if m.cfg.settingsTimeout > 0 && !(m.settled && m.settingsAcked) {
		d = m.startedAt.Add(m.cfg.settingsTimeout)
	}
	if m.cfg.pingAfter > 0 && m.active > 0 {
		var t time.Time
		if m.livePing {
			t = later(m.livePingAt, m.lastRead).Add(m.cfg.pingTimeout)
		} else {
			t = later(m.lastRead, m.busySince).Add(m.cfg.pingAfter)
		}
		if d.IsZero() || t.Before(d) {
			d = t
		}
	}
	return d, !d.IsZero()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// tick runs the connection's timers at now.
func (m *machine) tick(now time.Time) {
	if m.closed {
		return
	}
	if m.cfg.settingsTimeout > 0 && !(m.settled && m.settingsAcked) && !now.Before(m.startedAt.Add(m.cfg.settingsTimeout)) {
		// RFC 9113 §6.5.3.
		m.fail(now, &TimeoutError{Kind: TimeoutSettings, After: m.cfg.settingsTimeout}, endFlush)
		m.goAwaySent = true
		m.out.goAway(0, http2.ErrCodeSettingsTimeout, "")
		return
	}
	if m.cfg.pingAfter <= 0 || m.active == 0 {
		m.livePing = false
		return
	}
	if m.livePing {
		if !now.Before(later(m.livePingAt, m.lastRead).Add(m.cfg.pingTimeout)) {
			m.fail(now, &TimeoutError{Kind: TimeoutPing, After: m.cfg.pingTimeout}, endNow)
		}
		return
	}
	if !now.Before(later(m.lastRead, m.busySince).Add(m.cfg.pingAfter)) {
		m.livePing, m.livePingAt = true, now
		m.out.ping(false, m.livePingData())
	}
}

// ping queues a PING for the caller; done is closed when its ACK
// arrives or the connection ends.
func (m *machine) ping() (*userPing, error) {
	if m.closed {
		return nil, m.err
	}
	m.pingSeq++
	p := &userPing{done: make(chan struct{})}
	binary.BigEndian.PutUint64(p.data[:], m.pingSeq)
	p.data[0] = 'u'
	m.userPings = append(m.userPings, p)
	m.out.ping(false, p.data)
	return p, nil
}

// forgetPing drops a pending caller PING whose caller gave up.
func (m *machine) forgetPing(up *userPing) {
	for i, p := range m.userPings {
		if p == up {
			m.userPings = append(m.userPings[:i], m.userPings[i+1:]...)
			return
		}
	}
}

// shutdown starts a graceful close: GOAWAY(NO_ERROR), no new stream;
// the connection ends when the last stream does.
func (m *machine) shutdown(now time.Time) {
	if m.closed || m.goAwaySent {
		return
	}
	m.goAwaySent = true
	m.out.goAway(0, http2.ErrCodeNo, "")
	m.wakeWaiting()
	m.maybeFinish(now)
}

// close ends the connection at once with err.
func (m *machine) close(now time.Time, err error) {
	if !m.closed {
		m.fail(now, err, endNow)
	}
}
