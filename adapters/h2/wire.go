package h2

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
)

// maxTracked bounds the streams a Wire remembers: beyond it, the oldest
// stream is forgotten first. A caller that calls Forget and runs at most
// MaxConcurrentStreams at once on the connection never reaches it.
const maxTracked = 4096

// MaxConcurrentStreams is how many streams a transport may run at once
// on one observed connection, whatever the server's
// SETTINGS_MAX_CONCURRENT_STREAMS allows, for its Wire to keep the
// record of each (it keeps 4,096, and forgets the oldest beyond). It is
// x/net's own limit for a server that names none.
const MaxConcurrentStreams = 1000

// StreamFacts is what a Wire saw of one client stream.
type StreamFacts struct {
	// ID is the stream's identifier.
	ID uint32
	// HeadersWritten reports that the frame header of the HEADERS frame
	// that opened the stream was accepted by the connection: request bytes
	// reached the socket.
	HeadersWritten bool
	// DataWritten counts DATA payload bytes (padding included) the
	// connection accepted for the stream.
	DataWritten int64
	// EndStreamWritten reports that a frame carrying END_STREAM was
	// written in full: the whole request left.
	EndStreamWritten bool
	// ResetWritten reports that the client reset the stream, with
	// ResetWrittenCode (usually CANCEL).
	ResetWritten     bool
	ResetWrittenCode http2.ErrCode
	// ResponseStarted reports that the frame header of a HEADERS,
	// CONTINUATION, PUSH_PROMISE or DATA frame for the stream arrived from
	// the server: response bytes arrived, whether or not they ever formed
	// a response.
	ResponseStarted bool
	// ResetByPeer reports that the server reset the stream, with
	// ResetCode.
	ResetByPeer bool
	ResetCode   http2.ErrCode
}

// GoAwayFacts is the last GOAWAY a Wire saw from the server.
type GoAwayFacts struct {
	// LastStreamID is the frame's last stream ID (RFC 9113 §6.8).
	LastStreamID uint32
	// Code is the frame's error code.
	Code http2.ErrCode
	// Count is how many GOAWAY frames arrived.
	Count int
}

// Claim is what an attempt learned, when x/net said it had written the
// request's headers, about which stream is its own.
type Claim struct {
	// Stream is the request's stream ID; 0 when unknown.
	Stream uint32
	// Wrote reports that at least one byte of the request reached the
	// socket. With Wrote false, nothing of the request was sent.
	Wrote bool
}

// Wire watches the HTTP/2 frames crossing one client connection, in both
// directions, by following the 9-byte frame headers (RFC 9113 §4.1). It
// decodes no header block and buffers no payload beyond the 8 bytes of a
// GOAWAY or the 4 of an RST_STREAM. Its methods are safe for concurrent
// use.
//
// Frame boundaries depend on the byte stream alone, so a frame the Wire
// saw is a frame the peer sent, even one that x/net later rejected or
// never got to process.
type Wire struct {
	mu      sync.Mutex
	out     scanner // client to server; starts with the connection preface
	in      scanner // server to client
	streams map[uint32]*StreamFacts
	probe   scanner        // willWrite's copy of out
	free    []*StreamFacts // records Forget dropped, for track to reuse (at most maxFree)

	lastOpened     uint32 // highest stream ID whose HEADERS reached the socket
	lastClaimed    uint32 // highest stream ID an Attempt has claimed
	partialClaimed bool   // an Attempt claimed the frame cut off mid-header

	goAway     GoAwayFacts
	haveGoAway bool

	written, read int64

	// Read without mu, at the start of every Read (see Settled).
	settingsRead atomic.Bool // the server's first SETTINGS frame was read
	settled      atomic.Bool // and a Read started after the one that ended it
	closed       atomic.Bool // a Read failed
}

// Observe wraps c, the connection to hand to http2.Transport.NewClientConn,
// so that the returned Wire sees every byte the ClientConn writes and
// reads. c must carry plaintext HTTP/2: over TLS, wrap the *tls.Conn after
// its handshake, not the TCP connection beneath it. When c has a
// ConnectionState method, as a *tls.Conn does, so does the returned
// connection, and x/net reports the TLS state on responses.
func Observe(c net.Conn) (net.Conn, *Wire) {
	w := &Wire{streams: make(map[uint32]*StreamFacts)}
	w.out.preface = len(http2.ClientPreface)
	oc := &observedConn{Conn: c, w: w}
	if cs, ok := c.(connectionStater); ok {
		return &observedTLSConn{observedConn: oc, cs: cs}, w
	}
	return oc, w
}

type connectionStater interface {
	ConnectionState() tls.ConnectionState
}

// observedConn feeds a Wire with what crosses a connection.
type observedConn struct {
	net.Conn
	w *Wire
}

// Read reads from the connection and shows the Wire the bytes read.
func (c *observedConn) Read(p []byte) (int, error) {
	if !c.w.settled.Load() && c.w.settingsRead.Load() {
		c.w.settled.Store(true)
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.w.sawRead(p[:n])
	}
	if err != nil {
		c.w.closed.Store(true)
	}
	return n, err
}

// Write writes to the connection and shows the Wire the bytes the
// connection accepted (all of p, or the part before an error).
func (c *observedConn) Write(p []byte) (int, error) {
	c.w.willWrite(p)
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.w.sawWrite(p[:n])
	}
	return n, err
}

// NetConn returns the wrapped connection. x/net force-closes a stuck
// *tls.Conn only when it holds one itself; a transport that needs that
// can reach the TLS connection here.
func (c *observedConn) NetConn() net.Conn { return c.Conn }

// observedTLSConn is an observedConn over a connection with TLS state.
type observedTLSConn struct {
	*observedConn
	cs connectionStater
}

// ConnectionState returns the wrapped connection's TLS state.
func (c *observedTLSConn) ConnectionState() tls.ConnectionState { return c.cs.ConnectionState() }

// Stream returns what the Wire saw of stream id, and false when it has no
// record of it (no HEADERS frame for it was ever about to be written, or it
// was forgotten). A stream whose HEADERS the connection did not accept is
// known with HeadersWritten false.
func (w *Wire) Stream(id uint32) (StreamFacts, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.streams[id]; s != nil {
		return *s, true
	}
	return StreamFacts{}, false
}

// Settled reports that x/net has applied the server's first SETTINGS
// frame, so that ClientConn.ReserveNewRequest answers by the server's
// limits: the frame was read, and a Read started after the one that
// ended it. x/net's read loop, one goroutine, handles every frame of the
// bytes a Read returned before it reads again. (ClientConn.State says the
// same, but takes x/net's write lock, which a write to a server that
// stopped reading holds for as long as it stops.)
func (w *Wire) Settled() bool { return w.settled.Load() }

// Closed reports that a Read of the connection failed: x/net's read loop
// ends with it, and the ClientConn takes no new request.
func (w *Wire) Closed() bool { return w.closed.Load() }

// GoAway returns the last GOAWAY the server sent, and false when none
// arrived.
func (w *Wire) GoAway() (GoAwayFacts, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.goAway, w.haveGoAway
}

// Forget drops the record of stream id; call it when the exchange on the
// stream is over.
func (w *Wire) Forget(id uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.streams[id]; ok {
		delete(w.streams, id)
		if len(w.free) < maxFree {
			w.free = append(w.free, s) // no one else holds it: Stream returns copies
		}
	}
}

// maxFree bounds the stream records a Wire keeps for reuse: about the
// streams that end between two that start.
const maxFree = 16

// BytesWritten returns the number of bytes the connection accepted, the
// connection preface included.
func (w *Wire) BytesWritten() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written
}

// BytesRead returns the number of bytes read from the connection.
func (w *Wire) BytesRead() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.read
}

// claim returns the stream whose HEADERS frame was written last, unless
// an earlier claim took it. It must run where x/net calls
// httptrace.ClientTrace.WroteHeaders: x/net writes and flushes a
// request's HEADERS and calls that hook while holding its connection write
// lock, and assigns stream IDs in the order it writes HEADERS, so at that
// instant the newest opened stream is the caller's own — or, when x/net
// skipped the write after an earlier write error, one an earlier claim
// already took, and nothing of this request was written.
//
// The one case the frame headers cannot settle is a write cut off inside
// a frame header: some bytes of an unknown frame reached the socket. The
// first claim after it gets Wrote with no stream: if that frame was a
// HEADERS frame it was this request's (its claim comes right after its
// write, under the same lock); if it was another stream's frame, this
// request wrote nothing, and saying it did is the safe error.
func (w *Wire) claim() Claim {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastOpened > w.lastClaimed {
		w.lastClaimed = w.lastOpened
		return Claim{Stream: w.lastOpened, Wrote: true}
	}
	if w.out.midHeader() && !w.partialClaimed {
		w.partialClaimed = true
		return Claim{Wrote: true}
	}
	return Claim{}
}

// willWrite runs before p goes to the connection. It registers the
// streams whose opening HEADERS p carries, so that a response the server
// sends back before the Write call has returned still finds its stream.
// Only the bytes the connection then accepts mark a stream written.
//
// It scans a copy of the write scanner: x/net writes from one goroutine at
// a time (under its connection write lock), so the copy starts where the
// accepted bytes end.
func (w *Wire) willWrite(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.probe = w.out
	w.probe.feed(p, w.probeHeader, nil, ignoreFrameEnd)
}

// probeHeader is willWrite's frame-header callback: it tracks a stream
// whose HEADERS are about to be written.
func (w *Wire) probeHeader(h frameHead) {
	if h.typ == http2.FrameHeaders && h.stream > w.lastOpened {
		w.track(h.stream)
	}
}

func ignoreFrameEnd(frameHead, []byte) {}

func (w *Wire) sawWrite(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written += int64(len(p))
	w.out.feed(p, w.outHeader, w.outPayload, w.outEnd)
}

func (w *Wire) sawRead(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.read += int64(len(p))
	w.in.feed(p, w.inHeader, nil, w.inEnd)
}

// outHeader runs when the header of a frame the client writes completes.
func (w *Wire) outHeader(h frameHead) {
	w.partialClaimed = false
	if h.typ == http2.FrameHeaders && h.stream > w.lastOpened {
		// Client stream IDs only grow (RFC 9113 §5.1.1): a HEADERS frame
		// above every earlier one opens a stream; below, it carries
		// trailers.
		w.lastOpened = h.stream
		w.track(h.stream).HeadersWritten = true
	}
}

// outPayload runs for each run of payload bytes the client writes.
func (w *Wire) outPayload(h frameHead, n int) {
	if h.typ == http2.FrameData {
		if s := w.streams[h.stream]; s != nil {
			s.DataWritten += int64(n)
		}
	}
}

// outEnd runs when a frame the client writes is complete.
func (w *Wire) outEnd(h frameHead, payload []byte) {
	s := w.streams[h.stream]
	if s == nil {
		return
	}
	switch h.typ {
	case http2.FrameHeaders, http2.FrameData:
		if h.flags.Has(http2.FlagDataEndStream) { // the same bit as FlagHeadersEndStream
			s.EndStreamWritten = true
		}
	case http2.FrameRSTStream:
		if len(payload) >= 4 {
			s.ResetWritten = true
			s.ResetWrittenCode = http2.ErrCode(binary.BigEndian.Uint32(payload))
		}
	}
}

// inHeader runs when the header of a frame from the server completes.
func (w *Wire) inHeader(h frameHead) {
	switch h.typ {
	case http2.FrameHeaders, http2.FrameContinuation, http2.FramePushPromise, http2.FrameData:
		if s := w.streams[h.stream]; s != nil {
			s.ResponseStarted = true
		}
	}
}

// inEnd runs when a frame from the server is complete.
func (w *Wire) inEnd(h frameHead, payload []byte) {
	switch h.typ {
	case http2.FrameRSTStream:
		if s := w.streams[h.stream]; s != nil && len(payload) >= 4 {
			s.ResetByPeer = true
			s.ResetCode = http2.ErrCode(binary.BigEndian.Uint32(payload))
		}
	case http2.FrameSettings:
		if !h.flags.Has(http2.FlagSettingsAck) {
			w.settingsRead.Store(true)
		}
	case http2.FrameGoAway:
		if h.stream == 0 && len(payload) >= 8 {
			w.goAway.LastStreamID = binary.BigEndian.Uint32(payload) & (1<<31 - 1)
			w.goAway.Code = http2.ErrCode(binary.BigEndian.Uint32(payload[4:]))
			w.goAway.Count++
			w.haveGoAway = true
		}
	}
}

// track returns the record of stream id, creating it (and forgetting the
// oldest stream beyond maxTracked).
func (w *Wire) track(id uint32) *StreamFacts {
	if s := w.streams[id]; s != nil {
		return s
	}
	if len(w.streams) >= maxTracked {
		oldest := id
		for k := range w.streams {
			oldest = min(oldest, k)
		}
		delete(w.streams, oldest)
	}
	var s *StreamFacts
	if n := len(w.free); n > 0 {
		s = w.free[n-1]
		w.free = w.free[:n-1]
		*s = StreamFacts{ID: id}
	} else {
		s = &StreamFacts{ID: id}
	}
	w.streams[id] = s
	return s
}

// frameHead is a decoded frame header.
type frameHead struct {
	length uint32
	typ    http2.FrameType
	flags  http2.Flags
	stream uint32
}

// scanner follows frame boundaries through one direction of a byte
// stream fed in arbitrary pieces.
type scanner struct {
	preface int // bytes of the client connection preface still to skip
	hdr     [9]byte
	hdrN    int // header bytes collected
	head    frameHead
	remain  uint32 // payload bytes of the current frame still to come
	inFrame bool   // the header is complete; payload follows
	payload [8]byte
	payN    int // leading payload bytes kept (RST_STREAM, GOAWAY)
}

// midHeader reports that the stream stops inside a frame header.
func (s *scanner) midHeader() bool { return s.preface == 0 && !s.inFrame && s.hdrN > 0 }

// feed walks p. onHeader runs when a frame header completes, onPayload
// (if set) for each run of payload bytes, onEnd when a frame completes.
// Each pass of the loop consumes at least one byte of p.
func (s *scanner) feed(p []byte, onHeader func(frameHead), onPayload func(frameHead, int), onEnd func(frameHead, []byte)) {
	for len(p) > 0 {
		switch {
		case s.preface > 0:
			n := min(s.preface, len(p))
			s.preface -= n
			p = p[n:]
		case !s.inFrame:
			n := copy(s.hdr[s.hdrN:], p)
			s.hdrN += n
			p = p[n:]
			if s.hdrN < len(s.hdr) {
				continue
			}
			s.head = frameHead{
				length: uint32(s.hdr[0])<<16 | uint32(s.hdr[1])<<8 | uint32(s.hdr[2]),
				typ:    http2.FrameType(s.hdr[3]),
				flags:  http2.Flags(s.hdr[4]),
				stream: binary.BigEndian.Uint32(s.hdr[5:]) & (1<<31 - 1),
			}
			s.hdrN, s.payN, s.remain, s.inFrame = 0, 0, s.head.length, true
			onHeader(s.head)
			if s.remain == 0 {
				s.end(onEnd)
			}
		default:
			n := int(min(s.remain, uint32(len(p))))
			keep := copy(s.payload[s.payN:], p[:n])
			s.payN += keep
			s.remain -= uint32(n)
			if onPayload != nil {
				onPayload(s.head, n)
			}
			p = p[n:]
			if s.remain == 0 {
				s.end(onEnd)
			}
		}
	}
}

func (s *scanner) end(onEnd func(frameHead, []byte)) {
	s.inFrame = false
	onEnd(s.head, s.payload[:s.payN])
}
