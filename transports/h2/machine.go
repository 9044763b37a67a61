package h2

// This file holds the protocol state of one client connection as a value
// (STYLE 15): frames in, commands in, frames out (machine.out) and
// stream events out. It starts no goroutine, reads no clock and does no
// I/O: time arrives as a value on each call, frames to send are
// appended to machine.out for whoever writes them, and a stream's
// waiters are woken by a non-blocking send on its channels. The caller
// serializes every call (ClientConn holds its mutex).
//
// Exceptions to "transitions in one place", flagged here: a stream's
// send side is driven by commands (open, sendBody, sendTrailers) and
// its receive side by frames; both meet in maybeClose, the only place a
// stream leaves the table.

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// respPhase is where a stream's response is.
type respPhase uint8

const (
	respAwaitHeaders respPhase = iota // no final header section yet (interim ones may have come)
	respBody                          // final header section received; DATA and trailers may follow
	respDone                          // END_STREAM received
)

// uploadQueueBytes bounds the encoded frames waiting for the writer
// that request bodies may add to: an upload waits while more are queued,
// which is its back-pressure.
const uploadQueueBytes = 64 << 10

// earlyQueueBytes is uploadQueueBytes for the small in-memory bodies
// RoundTrip reads itself (at most earlyBodyMax each): they may queue up
// to it, so that under load many requests leave in one write without an
// upload goroutine each.
const earlyQueueBytes = 1 << 20

// errUploadStopped tells an upload to stop quietly: the response made
// the rest of the request body useless (or the stream ended cleanly).
var errUploadStopped = errors.New("h2: request body no longer wanted")

// stream is one request's stream: the protocol state the machine keeps
// and what the ClientConn around it needs to deliver it. It is never
// reused.
type stream struct {
	id uint32
	// The receive side's narrow fields, here beside id, where a word has
	// room (a stream is held per request in flight).
	status  int16 // the final response's: three digits (parseStatus)
	phase   respPhase
	started bool // the first response frame arrived
	ev      StreamEvents
	req     *http.Request
	head    requestHead

	// Send side. (Each side's flags sit together: a stream is held per
	// request in flight, and a flag between wider fields costs a word.)
	hdrBatch    uint64 // the out batch holding the opening HEADERS (machine.outSeq then)
	headersLeft bool   // a byte of the opening HEADERS was accepted by a write
	endInHeader bool   // END_STREAM rode on the opening HEADERS
	localEnded  bool   // END_STREAM queued
	endLeft     bool   // the frame with END_STREAM was accepted in full
	endVerdict  bool   // the writer reported on the frame with END_STREAM
	uploading   bool   // an upload goroutine owns the send side
	inBodyRead  bool   // the upload is inside req.Body.Read
	bodyClosing bool   // req.Body.Close has been (or is being) called
	sendWindow  int64
	stopUpload  error
	wakeSend    chan struct{}

	// Receive side (and status, phase and started, above).
	n1xx int32 // interim responses so far (config.max1xx is at most MaxInt32)
	// hdrBytes is the header list bytes of the interim responses so
	// far, up to config.maxHeaderList: all the final header section's
	// budget needs.
	hdrBytes      uint32
	header        http.Header
	trailer       http.Header
	contentLength int64 // -1 unknown
	received      int64 // DATA payload bytes received
	// The windows are at most Config.StreamWindow, an int32 (what the
	// server may still send on the stream, and what was consumed and
	// not yet returned with WINDOW_UPDATE), as is their sum with the
	// bytes buffered.
	recvWindow int32
	unacked    int32
	buf        recvBuf
	wakeResp   chan struct{}

	// End (and the receive side's noContent, where the word has room).
	open       bool // in machine.streams
	waiting    bool // in machine.waiting (not yet opened)
	reset      bool // RST_STREAM sent or received
	quiet      bool // ev is not called any more
	bodyClosed bool // the caller closed the response body (or it has none)
	bodyDone   bool // the ClientConn's: the caller has seen the body's end or closed it
	// deferred is set when the connection failed (machine.err, fixed
	// from then on) while the opening HEADERS were being written: the
	// writer's report decides the stream's error.
	deferred  bool
	noContent bool  // HEAD, 204, 304: no body whatever content-length says
	err       error // terminal error

	// The ClientConn's part.
	cc      *ClientConn
	res     *http.Response
	stopCtx func() bool // stops watching ctx once the body is done
}

// machine is the protocol state of one HTTP/2 client connection.
//
// Calling contract (the ClientConn follows it; a test or fuzzer may
// drive a machine alone):
//
//  1. Serialize every call.
//  2. Write out.buf to the connection in order, after the client
//     preface: take it with take, report each write with written.
//  3. Feed every frame read, in order, to frame (read errors to
//     readFailed), with the time it was read.
//  4. Call tick at or after deadline.
//  5. Once finished is set, close the connection: at once (closeNow) or
//     after writing what out holds.
type machine struct {
	cfg config

	// Our SETTINGS.
	startedAt     time.Time
	settingsAcked bool

	// The server's SETTINGS.
	settled           bool // its first SETTINGS arrived and was applied
	gotFrame          bool // a first frame arrived (it must be SETTINGS)
	peerMaxStreams    uint32
	peerInitWindow    int64
	peerMaxFrame      uint32
	peerMaxHeaderList uint32 // 0: unlimited
	peerExtConnect    bool

	// Connection flow control.
	sendWindow  int64 // what we may still send
	recvWindow  int64 // what the server may still send
	connUnacked int64 // consumed or discarded, not yet returned

	// Streams.
	streams   map[uint32]*stream
	waiting   []*stream // RoundTrips waiting to open (a slot, or SETTINGS)
	nextID    uint32
	active    int
	reserved  int
	busySince time.Time // when the last idle period ended
	idleSince time.Time // when the last stream ended (zero while busy)

	// GOAWAY.
	goAwayRecv bool
	goAway     GoAwayError // StreamID 0
	goAwaySent bool

	// PING.
	lastRead   time.Time
	livePing   bool
	livePingAt time.Time
	pingSeq    uint64
	userPings  []*userPing

	// The header block being received.
	hdec   *hpack.Decoder
	blk    headerBlock
	fields []hpack.HeaderField

	// Writing.
	henc       *hpack.Encoder
	hbuf       bytesBuffer
	out        outBuf
	outSeq     uint64
	outControl int  // acknowledgements queued in out
	flight     bool // the writer holds a batch it has not reported
	flightSeq  uint64

	uploadsWaitQueue  bool // an upload waits for the writer to drain out
	uploadsWaitWindow bool // an upload waits for connection window

	// End of the connection.
	closed     bool // no stream can go on; err says why
	err        error
	finished   bool      // the connection should be closed
	closeNow   bool      // ... without flushing out first
	bodyCloses []*stream // request bodies to close (an upload blocked in Read)
	// endDue holds the streams that ended, out of the table, whose
	// END_STREAM frame the writer has not reported on yet: their body's
	// end waits for that report (see readBody).
	endDue map[*stream]struct{}
}

// userPing is a PING sent for ClientConn.Ping.
type userPing struct {
	data  [8]byte
	done  chan struct{} // closed on its ACK or the end of the connection
	acked bool
}

// headerBlock is the header block being received.
type headerBlock struct {
	active     bool
	id         uint32
	st         *stream // nil: decoded and dropped (a closed stream)
	endStream  bool
	frames     int
	bytes      int64
	size       uint64 // header list size of the fields
	budget     uint64 // the most size may reach
	truncated  bool
	invalid    string
	sawRegular bool
}

// bytesBuffer is a minimal append buffer the HPACK encoder writes into.
type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// newMachine returns the state of a connection starting at now, with
// the client preface, our SETTINGS and the connection window update
// queued in out.
func newMachine(cfg config, now time.Time) *machine {
	m := &machine{
		cfg:            cfg,
		startedAt:      now,
		peerMaxStreams: defaultPeerMaxStreams,
		peerInitWindow: initialWindow,
		peerMaxFrame:   minMaxFrameSize,
		sendWindow:     initialWindow,
		recvWindow:     initialWindow,
		streams:        make(map[uint32]*stream),
		nextID:         1,
		lastRead:       now,
		busySince:      now,
		idleSince:      now,
	}
	m.hdec = hpack.NewDecoder(headerTableSize, m.emitField)
	m.hdec.SetMaxStringLength(int(min(uint64(cfg.maxHeaderList), 1<<30)))
	m.henc = hpack.NewEncoder(&m.hbuf)
	m.out.buf = append(m.out.buf, http2.ClientPreface...)
	m.out.settings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(cfg.streamWindow)},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: cfg.maxReadFrame},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: cfg.maxHeaderList},
	)
	if inc := cfg.connWindow - initialWindow; inc > 0 {
		m.out.windowUpdate(0, uint32(inc))
		m.recvWindow += inc
	}
	return m
}

// wake signals a waiter without blocking.
func wake(ch chan struct{}) {
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// idle reports whether id names a stream that has never been opened
// (RFC 9113 §5.1): one of ours not yet allocated, or any even
// (server-initiated) stream, since push is disabled.
func (m *machine) idle(id uint32) bool {
	return id != 0 && (id%2 == 0 || id >= m.nextID)
}

// limit is how many streams may be open at once.
func (m *machine) limit() int {
	return int(min(uint64(m.peerMaxStreams), uint64(m.cfg.maxStreams)))
}

// canTake reports whether a new stream could be reserved now.
func (m *machine) canTake() bool {
	return !m.closed && !m.goAwayRecv && !m.goAwaySent &&
		m.active+m.reserved < m.limit() &&
		uint64(m.nextID)+2*uint64(m.reserved) <= maxStreamID
}

// reserve takes a stream slot if one is free.
func (m *machine) reserve() bool {
	if !m.canTake() {
		return false
	}
	m.reserved++
	return true
}

// unreserve gives back a slot taken by reserve and not used.
func (m *machine) unreserve(now time.Time) {
	if m.reserved > 0 {
		m.reserved--
		m.maybeFinish(now)
	}
}

// ---- Frames in ----

// frame applies one frame read from the server at now.
func (m *machine) frame(now time.Time, f http2.Frame) {
	if m.closed {
		return
	}
	m.lastRead = now
	if !m.gotFrame {
		m.gotFrame = true
		if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
			// RFC 9113 §3.4: the server preface is a SETTINGS frame.
			m.connError(http2.ErrCodeProtocol, "server preface: first frame is "+f.Header().Type.String()+", not SETTINGS")
			return
		}
	}
	if m.blk.active {
		if c, ok := f.(*http2.ContinuationFrame); !ok || c.StreamID != m.blk.id {
			// §6.10: a header block is contiguous (x/net's Framer
			// checks it too; a machine driven alone may not have one).
			m.connError(http2.ErrCodeProtocol, "header block of stream "+itoa(m.blk.id)+" interrupted by "+f.Header().Type.String())
			return
		}
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		m.onData(now, f)
	case *http2.HeadersFrame:
		m.onHeaders(now, f)
	case *http2.ContinuationFrame:
		m.onContinuation(now, f)
	case *http2.MetaHeadersFrame:
		m.onMetaHeaders(now, f)
	case *http2.SettingsFrame:
		m.onSettings(now, f)
	case *http2.PingFrame:
		m.onPing(f)
	case *http2.GoAwayFrame:
		m.onGoAway(now, f)
	case *http2.WindowUpdateFrame:
		m.onWindowUpdate(now, f)
	case *http2.RSTStreamFrame:
		m.onRSTStream(now, f)
	case *http2.PushPromiseFrame:
		// §6.6, §8.4: we sent SETTINGS_ENABLE_PUSH = 0.
		m.connError(http2.ErrCodeProtocol, "PUSH_PROMISE with push disabled")
	default:
		// PRIORITY, PRIORITY_UPDATE and unknown frame types are ignored
		// (§5.5, §6.3).
	}
}

// framerError handles an error returned by the Framer for a frame whose
// header was fh (or the zero header when reading the header failed).
func (m *machine) framerError(now time.Time, fh http2.FrameHeader, err error, detail error) {
	if m.closed {
		return
	}
	reason := func(def string) string {
		if detail != nil {
			return detail.Error()
		}
		return def
	}
	var ce http2.ConnectionError
	var se http2.StreamError
	switch {
	case errors.Is(err, http2.ErrFrameTooLarge):
		// §4.2: a frame larger than our SETTINGS_MAX_FRAME_SIZE.
		m.connError(http2.ErrCodeFrameSize, "frame of "+itoa(fh.Length)+" bytes exceeds SETTINGS_MAX_FRAME_SIZE")
	case errors.As(err, &ce) && fh.Type == http2.FramePriority && fh.StreamID != 0 && http2.ErrCode(ce) == http2.ErrCodeFrameSize:
		// §6.3: a PRIORITY frame of the wrong length is a stream error
		// (x/net's Framer makes it a connection error). PRIORITY is
		// otherwise ignored, so only an open stream is reset.
		m.lastRead = now
		if st := m.streams[fh.StreamID]; st != nil {
			m.streamError(now, st, http2.ErrCodeFrameSize, errors.New("PRIORITY frame of the wrong length"))
		}
	case errors.As(err, &ce):
		m.connError(http2.ErrCode(ce), reason("invalid "+fh.Type.String()+" frame"))
	case errors.As(err, &se):
		m.lastRead = now
		if fh.Type == http2.FrameHeaders || m.idle(se.StreamID) {
			// A HEADERS frame we could not parse leaves the HPACK
			// state unknown (§4.3); on an idle stream a reset cannot
			// be sent (§5.1).
			m.connError(se.Code, reason("invalid "+fh.Type.String()+" frame on stream "+itoa(se.StreamID)))
			return
		}
		if st := m.streams[se.StreamID]; st != nil {
			m.streamError(now, st, se.Code, errors.New(reason("invalid "+fh.Type.String()+" frame")))
		}
	default:
		m.readFailed(now, err)
	}
}

// readFailed ends the connection after a read error.
func (m *machine) readFailed(now time.Time, err error) {
	if m.closed {
		return
	}
	m.fail(now, &ReadError{Err: err}, endNow)
}

func (m *machine) onData(now time.Time, f *http2.DataFrame) {
	id, length := f.StreamID, int64(f.Length)
	if m.idle(id) {
		m.connError(http2.ErrCodeProtocol, "DATA on idle stream "+itoa(id)) // §5.1
		return
	}
	if length > m.recvWindow {
		// §6.9.1: the server exceeded the connection window.
		m.connError(http2.ErrCodeFlowControl, "DATA exceeds the connection flow-control window")
		return
	}
	m.recvWindow -= length
	st := m.streams[id]
	if st == nil {
		// A closed stream (§5.1: frames after our RST_STREAM are
		// ignored); the connection window is still spent (§6.9).
		m.creditConn(length)
		return
	}
	if st.phase == respDone {
		// §5.1: half-closed (remote).
		m.connError(http2.ErrCodeStreamClosed, "DATA on stream "+itoa(id)+" after END_STREAM")
		return
	}
	if length > int64(st.recvWindow) {
		m.creditConn(length)
		m.streamError(now, st, http2.ErrCodeFlowControl, errors.New("DATA exceeds the stream flow-control window"))
		return
	}
	st.recvWindow -= int32(length)
	data := f.Data()
	switch {
	case st.phase == respAwaitHeaders:
		m.creditConn(length)
		m.streamError(now, st, http2.ErrCodeProtocol, errors.New("DATA before the response header section")) // §8.1
		return
	case st.noContent && len(data) > 0:
		m.creditConn(length)
		m.streamError(now, st, http2.ErrCodeProtocol, errors.New("DATA in a response that has no content")) // §8.1.1
		return
	}
	st.received += int64(len(data))
	if !st.noContent && st.contentLength >= 0 && st.received > st.contentLength {
		m.creditConn(length)
		m.streamError(now, st, http2.ErrCodeProtocol, errors.New("more DATA than content-length")) // §8.1.1
		return
	}
	if pad := length - int64(len(data)); pad > 0 {
		m.creditStream(st, pad)
		m.creditConn(pad)
	}
	if len(data) > 0 {
		if st.bodyClosed {
			m.creditConn(int64(len(data)))
		} else {
			st.buf.write(data)
			wake(st.wakeResp)
		}
	}
	if f.StreamEnded() {
		m.remoteEnd(now, st)
	}
}

// startBlock begins a header block on stream id (HEADERS or a
// MetaHeadersFrame).
func (m *machine) startBlock(id uint32, endStream bool) bool {
	if m.idle(id) {
		// §5.1.1, §8.4: the server cannot open streams.
		m.connError(http2.ErrCodeProtocol, "HEADERS on idle stream "+itoa(id))
		return false
	}
	st := m.streams[id]
	if st != nil && st.phase == respDone {
		m.connError(http2.ErrCodeStreamClosed, "HEADERS on stream "+itoa(id)+" after END_STREAM") // §5.1
		return false
	}
	m.blk = headerBlock{active: true, id: id, st: st, endStream: endStream, frames: 1}
	if st != nil {
		m.responseStarted(st)
		m.blk.budget = uint64(m.cfg.maxHeaderList)
		if st.phase == respAwaitHeaders {
			m.blk.budget -= min(uint64(st.hdrBytes), m.blk.budget)
		}
	}
	m.fields = m.fields[:0]
	return true
}

// responseStarted records the first response frame of st.
func (m *machine) responseStarted(st *stream) {
	if st.started {
		return
	}
	st.started = true
	m.serverSawHeaders(st)
	if st.live() {
		st.ev.ResponseStarted()
	}
}

// serverSawHeaders records that the server answered on st (a response
// frame, RST_STREAM), so it read the whole opening header block even if
// the writer has not reported the write yet.
func (m *machine) serverSawHeaders(st *stream) {
	if st.headersLeft {
		return
	}
	st.headersLeft = true
	if st.live() {
		st.ev.HeadersWritten(st.id)
	}
	if st.endInHeader && !st.endLeft {
		st.endLeft, st.endVerdict = true, true
		if st.live() {
			st.ev.RequestWritten()
		}
	}
}

// live reports whether st's events are still delivered.
func (st *stream) live() bool { return st.ev != nil && !st.quiet }

func (m *machine) onHeaders(now time.Time, f *http2.HeadersFrame) {
	if !m.startBlock(f.StreamID, f.StreamEnded()) {
		return
	}
	m.fragment(f.HeaderBlockFragment())
	if !m.closed && f.HeadersEnded() {
		m.endBlock(now)
	}
}

func (m *machine) onContinuation(now time.Time, f *http2.ContinuationFrame) {
	if !m.blk.active {
		m.connError(http2.ErrCodeProtocol, "CONTINUATION without a header block") // §6.10
		return
	}
	m.blk.frames++
	if m.blk.frames > m.cfg.maxBlockFrames {
		m.connError(http2.ErrCodeEnhanceYourCalm, "header block of more than "+itoa(m.cfg.maxBlockFrames)+" frames")
		return
	}
	m.fragment(f.HeaderBlockFragment())
	if !m.closed && f.HeadersEnded() {
		m.endBlock(now)
	}
}

// fragment decodes one fragment of the header block.
func (m *machine) fragment(p []byte) {
	m.blk.bytes += int64(len(p))
	if m.blk.bytes > m.cfg.maxBlockBytes {
		m.connError(http2.ErrCodeEnhanceYourCalm, "header block of more than "+strconv.FormatInt(m.cfg.maxBlockBytes, 10)+" bytes")
		return
	}
	if _, err := m.hdec.Write(p); err != nil {
		if errors.Is(err, hpack.ErrStringLength) {
			m.connError(http2.ErrCodeEnhanceYourCalm, "header field longer than MaxHeaderListSize")
			return
		}
		m.connError(http2.ErrCodeCompression, "HPACK: "+err.Error()) // §4.3
	}
}

func (m *machine) endBlock(now time.Time) {
	if err := m.hdec.Close(); err != nil {
		m.connError(http2.ErrCodeCompression, "HPACK: "+err.Error())
		return
	}
	m.deliverBlock(now)
}

func (m *machine) onMetaHeaders(now time.Time, f *http2.MetaHeadersFrame) {
	if !m.startBlock(f.StreamID, f.StreamEnded()) {
		return
	}
	for _, hf := range f.Fields {
		m.emitField(hf)
	}
	if f.Truncated {
		m.blk.truncated = true
	}
	m.deliverBlock(now)
}

// emitField collects and checks one decoded field of the block.
func (m *machine) emitField(hf hpack.HeaderField) {
	b := &m.blk
	if b.st == nil || b.truncated {
		return
	}
	size := uint64(hf.Size())
	if b.size+size > b.budget {
		b.truncated = true
		return
	}
	b.size += size
	if b.invalid != "" {
		return
	}
	switch {
	case hf.IsPseudo():
		if b.sawRegular {
			b.invalid = "pseudo-header field after a regular field" // §8.3
		} else if hf.Name != ":status" {
			b.invalid = "pseudo-header field " + strconv.Quote(hf.Name) + " in a response" // §8.3
		}
	case !validResponseName(hf.Name):
		b.invalid = "invalid field name " + strconv.Quote(hf.Name) // §8.2.1
	case !validResponseValue(hf.Value):
		b.invalid = "invalid value of field " + strconv.Quote(hf.Name) // §8.2.1
	case connectionSpecific(hf.Name):
		b.invalid = "connection-specific field " + strconv.Quote(hf.Name) // §8.2.2
	}
	if !hf.IsPseudo() {
		b.sawRegular = true
	}
	m.fields = append(m.fields, hf)
}

// deliverBlock applies a complete header block to its stream.
func (m *machine) deliverBlock(now time.Time) {
	b := m.blk
	m.blk = headerBlock{}
	fields := m.fields
	defer func() {
		clear(fields)
		m.fields = fields[:0]
		if cap(fields) > 1024 {
			m.fields = nil // a huge header section does not pin its slice
		}
	}()
	st := b.st
	if st == nil || m.streams[b.id] != st {
		return // the stream is closed (or was reset while the block came)
	}
	if b.invalid != "" {
		m.streamError(now, st, http2.ErrCodeProtocol, errors.New(b.invalid)) // §8.1.1: malformed
		return
	}
	if b.truncated {
		m.streamError(now, st, http2.ErrCodeEnhanceYourCalm, ErrHeaderListTooLarge)
		return
	}
	if st.phase == respBody {
		m.onTrailers(now, st, fields, b.endStream)
		return
	}
	status, ok := parseStatus(fields)
	if !ok {
		m.streamError(now, st, http2.ErrCodeProtocol, errors.New("missing or invalid :status")) // §8.3.2
		return
	}
	if status < 200 {
		switch {
		case status == 101:
			m.streamError(now, st, http2.ErrCodeProtocol, errors.New("101 Switching Protocols in HTTP/2")) // §8.6
		case b.endStream:
			m.streamError(now, st, http2.ErrCodeProtocol, errors.New("interim response with END_STREAM")) // §8.1
		default:
			m.onInformational(now, st, status, fields, b.size)
		}
		return
	}
	m.onFinalHeaders(now, st, status, fields, b.endStream)
}

// parseStatus returns the single :status of a response header section.
func parseStatus(fields []hpack.HeaderField) (int, bool) {
	status, n := 0, 0
	for _, f := range fields {
		if !f.IsPseudo() {
			break
		}
		n++
		v := f.Value
		if len(v) != 3 || v[0] < '1' || v[0] > '5' || v[1] < '0' || v[1] > '9' || v[2] < '0' || v[2] > '9' {
			return 0, false
		}
		status = int(v[0]-'0')*100 + int(v[1]-'0')*10 + int(v[2]-'0')
	}
	return status, n == 1
}

func (m *machine) onInformational(now time.Time, st *stream, status int, fields []hpack.HeaderField, size uint64) {
	st.n1xx++
	if int(st.n1xx) > m.cfg.max1xx {
		m.streamError(now, st, http2.ErrCodeEnhanceYourCalm, ErrTooManyInformational)
		return
	}
	st.hdrBytes = uint32(min(uint64(st.hdrBytes)+size, uint64(m.cfg.maxHeaderList)))
	if !st.live() {
		return
	}
	if err := st.ev.Informational(status, buildHeader(fields), int(size)); err != nil {
		m.streamError(now, st, http2.ErrCodeCancel, err)
	}
}

func (m *machine) onFinalHeaders(now time.Time, st *stream, status int, fields []hpack.HeaderField, endStream bool) {
	cl, ok := parseContentLength(fields)
	if !ok {
		m.streamError(now, st, http2.ErrCodeProtocol, errors.New("invalid content-length")) // §8.1.1
		return
	}
	st.status = int16(status) // three digits (parseStatus)
	st.header = buildHeader(fields)
	// §8.1.1: a response with no content may announce a length.
	st.noContent = st.head.method == http.MethodHead || status == 204 || status == 304
	st.contentLength = cl
	st.phase = respBody
	if st.live() {
		st.ev.ResponseHeaders(status)
	}
	if status >= 300 && st.uploading && !st.head.connect {
		// The server does not want the rest of the body (x/net's
		// heuristic): stop uploading; the stream is reset once the
		// response is complete.
		m.stopUploading(st, errUploadStopped)
	}
	wake(st.wakeResp)
	if endStream {
		m.remoteEnd(now, st)
	}
}

// parseContentLength returns the content-length of a header section
// (-1 if absent); several fields must agree.
func parseContentLength(fields []hpack.HeaderField) (int64, bool) {
	cl := int64(-1)
	for _, f := range fields {
		if f.Name != "content-length" {
			continue
		}
		n, err := strconv.ParseUint(f.Value, 10, 63)
		if err != nil || f.Value == "" || f.Value[0] == '+' || (cl >= 0 && int64(n) != cl) {
			return 0, false
		}
		cl = int64(n)
	}
	return cl, true
}

func (m *machine) onTrailers(now time.Time, st *stream, fields []hpack.HeaderField, endStream bool) {
	if !endStream {
		m.streamError(now, st, http2.ErrCodeProtocol, errors.New("second header section without END_STREAM")) // §8.1
		return
	}
	for _, f := range fields {
		if f.IsPseudo() {
			m.streamError(now, st, http2.ErrCodeProtocol, errors.New("pseudo-header field in trailers")) // §8.1
			return
		}
	}
	st.trailer = buildHeader(fields)
	m.remoteEnd(now, st)
}

// remoteEnd records END_STREAM from the server.
func (m *machine) remoteEnd(now time.Time, st *stream) {
	if !st.noContent && st.contentLength >= 0 && st.received != st.contentLength {
		m.streamError(now, st, http2.ErrCodeProtocol, errors.New("DATA length "+strconv.FormatInt(st.received, 10)+
			" differs from content-length "+strconv.FormatInt(st.contentLength, 10))) // §8.1.1
		return
	}
	st.phase = respDone
	wake(st.wakeResp)
	if !st.localEnded && !st.reset && !st.head.connect {
		// The response is complete before the request: the rest of the
		// body is not wanted. Close our side with RST_STREAM(CANCEL)
		// (§8.1 lets the server ask for this with NO_ERROR).
		m.stopUploading(st, errUploadStopped)
		m.sendReset(st, http2.ErrCodeCancel)
	}
	m.maybeClose(now, st)
}

func (m *machine) onSettings(now time.Time, f *http2.SettingsFrame) {
	if f.IsAck() {
		m.settingsAcked = true // unsolicited ACKs are ignored
		return
	}
	for i := range f.NumSettings() {
		s := f.Setting(i)
		switch s.ID {
		case http2.SettingHeaderTableSize:
			m.henc.SetMaxDynamicTableSize(s.Val) // bounded by the encoder's 4096 limit
		case http2.SettingEnablePush:
			if s.Val != 0 {
				// §6.5.2: a server MUST NOT set it to 1; other values
				// are errors too.
				m.connError(http2.ErrCodeProtocol, "SETTINGS_ENABLE_PUSH = "+itoa(s.Val)+" from a server")
				return
			}
		case http2.SettingMaxConcurrentStreams:
			m.peerMaxStreams = s.Val
		case http2.SettingInitialWindowSize:
			// §6.9.2: the change applies to every open stream; the
			// Framer already refused values above 2^31-1.
			delta := int64(s.Val) - m.peerInitWindow
			m.peerInitWindow = int64(s.Val)
			for _, st := range m.streams {
				st.sendWindow += delta
				if st.sendWindow > maxWindow {
					m.connError(http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream window")
					return
				}
				if delta > 0 {
					wake(st.wakeSend)
				}
			}
		case http2.SettingMaxFrameSize:
			if s.Val < minMaxFrameSize || s.Val > maxMaxFrameSize {
				m.connError(http2.ErrCodeProtocol, "SETTINGS_MAX_FRAME_SIZE = "+itoa(s.Val)) // §6.5.2
				return
			}
			m.peerMaxFrame = s.Val
		case http2.SettingMaxHeaderListSize:
			m.peerMaxHeaderList = s.Val
		case http2.SettingEnableConnectProtocol:
			switch {
			case s.Val > 1:
				m.connError(http2.ErrCodeProtocol, "SETTINGS_ENABLE_CONNECT_PROTOCOL = "+itoa(s.Val)) // RFC 8441 §3
				return
			case s.Val == 0 && m.peerExtConnect:
				m.connError(http2.ErrCodeProtocol, "SETTINGS_ENABLE_CONNECT_PROTOCOL withdrawn") // RFC 8441 §3
				return
			}
			m.peerExtConnect = s.Val == 1
		}
	}
	m.out.settingsAck() // §6.5.3
	if !m.countControl() {
		return
	}
	if !m.settled {
		m.settled = true
		for _, st := range m.streams {
			wake(st.wakeSend) // request bodies wait for the server's SETTINGS (choice 24)
		}
	}
	m.wakeWaiting()
}

// countControl counts one acknowledgement queued in out; it ends the
// connection when the writer does not drain them.
func (m *machine) countControl() bool {
	m.outControl++
	if m.outControl > m.cfg.maxControl {
		m.connError(http2.ErrCodeEnhanceYourCalm, "more than "+itoa(m.cfg.maxControl)+" SETTINGS and PING acknowledgements queued")
		return false
	}
	return true
}

func (m *machine) onPing(f *http2.PingFrame) {
	if !f.IsAck() {
		m.out.ping(true, f.Data) // §6.7
		m.countControl()
		return
	}
	if m.livePing && f.Data == m.livePingData() {
		m.livePing = false
		return
	}
	for i, p := range m.userPings {
		if p.data == f.Data {
			p.acked = true
			close(p.done)
			m.userPings = append(m.userPings[:i], m.userPings[i+1:]...)
			return
		}
	}
}

// livePingData is the payload of the liveness PING (user pings use
// other payloads).
func (m *machine) livePingData() [8]byte { return [8]byte{'l', 'i', 'v', 'e'} }

func (m *machine) onGoAway(now time.Time, f *http2.GoAwayFrame) {
	last := f.LastStreamID
	if m.goAwayRecv && last > m.goAway.LastStreamID {
		last = m.goAway.LastStreamID // §6.8: the boundary may only go down; never believe a raise
	}
	if !m.goAwayRecv || last != m.goAway.LastStreamID || f.ErrCode != m.goAway.Code {
		dbg := f.DebugData()
		m.goAway = GoAwayError{LastStreamID: last, Code: f.ErrCode, Debug: string(dbg[:min(len(dbg), MaxGoAwayDebug)])}
	}
	m.goAwayRecv = true
	for id, st := range m.streams {
		if id > last {
			// §6.8: not processed, and never will be.
			e := m.goAway
			e.StreamID = id
			m.failStream(st, &e)
			m.stopUploading(st, &e)
			st.reset = true
			m.maybeClose(now, st)
		}
	}
	m.wakeWaiting()
	m.maybeFinish(now)
}

func (m *machine) onWindowUpdate(now time.Time, f *http2.WindowUpdateFrame) {
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		m.sendWindow += inc
		if m.sendWindow > maxWindow {
			m.connError(http2.ErrCodeFlowControl, "WINDOW_UPDATE overflows the connection window") // §6.9.1
			return
		}
		if m.uploadsWaitWindow {
			m.uploadsWaitWindow = false
			for _, st := range m.streams {
				if st.uploading {
					wake(st.wakeSend)
				}
			}
		}
		return
	}
	if m.idle(f.StreamID) {
		m.connError(http2.ErrCodeProtocol, "WINDOW_UPDATE on idle stream "+itoa(f.StreamID)) // §5.1
		return
	}
	st := m.streams[f.StreamID]
	if st == nil {
		return // closed: §6.9 allows it after END_STREAM
	}
	st.sendWindow += inc
	if st.sendWindow > maxWindow {
		m.streamError(now, st, http2.ErrCodeFlowControl, errors.New("WINDOW_UPDATE overflows the stream window")) // §6.9.1
		return
	}
	wake(st.wakeSend)
}

func (m *machine) onRSTStream(now time.Time, f *http2.RSTStreamFrame) {
	if m.idle(f.StreamID) {
		m.connError(http2.ErrCodeProtocol, "RST_STREAM on idle stream "+itoa(f.StreamID)) // §6.4
		return
	}
	st := m.streams[f.StreamID]
	if st == nil {
		return
	}
	m.serverSawHeaders(st)
	st.reset = true
	if st.phase == respDone {
		// The response is complete; the server no longer wants the
		// request body (§8.1, typically NO_ERROR).
		m.stopUploading(st, errUploadStopped)
	} else {
		err := &StreamError{StreamID: st.id, Code: f.ErrCode, Remote: true}
		m.failStream(st, err)
		m.stopUploading(st, err)
	}
	m.maybeClose(now, st)
}

// ---- Stream and connection ends ----

// failStream sets st's terminal error (the first one wins) and wakes
// its waiters.
func (m *machine) failStream(st *stream, err error) {
	if st.err == nil {
		st.err = err
	}
	st.quiet = true
	wake(st.wakeResp)
	wake(st.wakeSend)
}

// stopUploading makes the upload of st stop (with err: errUploadStopped
// quietly, anything else as the stream's failure).
func (m *machine) stopUploading(st *stream, err error) {
	if !st.uploading || st.stopUpload != nil {
		return
	}
	st.stopUpload = err
	wake(st.wakeSend)
	if st.inBodyRead && !st.bodyClosing {
		// The upload is blocked in req.Body.Read: closing the body is
		// how net/http unblocks it.
		st.bodyClosing = true
		m.bodyCloses = append(m.bodyCloses, st)
	}
}

// sendReset queues RST_STREAM for an open stream.
func (m *machine) sendReset(st *stream, code http2.ErrCode) {
	if st.open && !st.reset {
		st.reset = true
		m.out.rstStream(st.id, code)
	}
}

// streamError resets st with code because of cause (§5.4.2).
func (m *machine) streamError(now time.Time, st *stream, code http2.ErrCode, cause error) {
	err := &StreamError{StreamID: st.id, Code: code, Cause: cause}
	m.sendReset(st, code)
	st.reset = true
	m.failStream(st, err)
	m.stopUploading(st, err)
	m.maybeClose(now, st)
}

// maybeClose removes st from the table once both sides are done.
func (m *machine) maybeClose(now time.Time, st *stream) {
	if !st.open || !(st.reset || (st.localEnded && st.phase == respDone)) {
		return
	}
	st.open = false
	delete(m.streams, st.id)
	m.active--
	if st.err == nil && (st.endLeft || !st.localEnded) {
		// The exchange is over and every report is in; otherwise the
		// writer's report of the END_STREAM frame is still due (written).
		st.quiet = true
	} else if st.err == nil && !st.endVerdict {
		if m.endDue == nil {
			m.endDue = map[*stream]struct{}{}
		}
		m.endDue[st] = struct{}{}
	}
	if m.active == 0 {
		m.idleSince = now
	}
	m.wakeWaiting()
	m.maybeFinish(now)
}

// maybeFinish closes a connection that has nothing left to do after a
// GOAWAY (received or sent).
func (m *machine) maybeFinish(now time.Time) {
	if m.closed || m.active > 0 || m.reserved > 0 || !(m.goAwayRecv || m.goAwaySent) {
		return
	}
	var err error = ErrShutdown
	if m.goAwayRecv {
		e := m.goAway
		err = &e
	}
	m.fail(now, err, endGraceful)
}

func (m *machine) wakeWaiting() {
	for _, st := range m.waiting {
		wake(st.wakeResp)
	}
}

// connError ends the connection because of a protocol error of the
// server's (§5.4.1): GOAWAY with code, then close.
func (m *machine) connError(code http2.ErrCode, reason string) {
	if m.closed {
		return
	}
	m.fail(time.Time{}, &ConnectionError{Code: code, Reason: reason}, endFlush)
	m.goAwaySent = true
	m.out.goAway(0, code, reason[:min(len(reason), 256)])
}

// endMode says how a connection ends.
type endMode uint8

const (
	endNow      endMode = iota // the connection is broken: drop what is queued and close at once
	endFlush                   // drop what is queued, write what the caller queues next (GOAWAY), close
	endGraceful                // write what is queued, then close
)

// fail ends the connection with err. Unless mode is endGraceful, frames
// not yet taken by the writer are dropped: a stream whose HEADERS were
// among them gets an *UnsentError; one whose HEADERS are in the
// writer's hands waits for its verdict (written); the others get err.
func (m *machine) fail(now time.Time, err error, mode endMode) {
	m.closed, m.err, m.finished, m.closeNow = true, err, true, mode == endNow
	if mode != endGraceful {
		m.out.reset(false)
		m.outControl = 0
	}
	for _, st := range m.streams {
		switch {
		case st.headersLeft:
			m.failStream(st, m.streamConnErr(st))
		case st.hdrBatch == m.outSeq || !m.flight || st.hdrBatch != m.flightSeq:
			m.failStream(st, &UnsentError{Cause: err})
		default:
			st.deferred = true
		}
		m.stopUploading(st, errUploadStopped)
		st.open = false
	}
	clear(m.streams)
	m.active = 0
	for _, st := range m.waiting {
		m.failStream(st, &UnsentError{Cause: err})
	}
	for st := range m.endDue {
		st.endVerdict = true // its END_STREAM will not be written now
		wake(st.wakeResp)
	}
	clear(m.endDue)
	for _, p := range m.userPings {
		close(p.done)
	}
	m.userPings = nil
	if !now.IsZero() {
		m.idleSince = now
	}
}

// streamConnErr is the error of a stream whose HEADERS had left, when
// the connection ends.
func (m *machine) streamConnErr(st *stream) error {
	switch e := m.err.(type) {
	case *WriteError:
		return &WriteError{Err: e.Err, StreamID: st.id, HeadersWritten: true}
	case *ReadError:
		if m.goAwayRecv {
			// The server announced the end and closed: the boundary
			// tells whether this stream was processed.
			g := m.goAway
			g.StreamID = st.id
			return &g
		}
	}
	return m.err
}

func itoa[T ~uint32 | ~int | ~uint64](v T) string { return strconv.FormatUint(uint64(v), 10) }
