package h2

import (
	"encoding/binary"
	"sync"

	"golang.org/x/net/http2"
)

// Chunks of response body buffers and upload buffers come from pools of
// three sizes, so that a stream holds memory only while it has unread
// data, and a small body takes a small chunk.
const (
	chunkSmall  = 1 << 10
	chunkMedium = 4 << 10
	chunkLarge  = 16 << 10
)

var (
	poolSmall  = sync.Pool{New: func() any { return new([chunkSmall]byte) }}
	poolMedium = sync.Pool{New: func() any { return new([chunkMedium]byte) }}
	poolLarge  = sync.Pool{New: func() any { return new([chunkLarge]byte) }}
)

// getChunk returns a pooled buffer of at least n bytes (at most
// chunkLarge), full length.
func getChunk(n int) []byte {
	switch {
	case n <= chunkSmall:
		return poolSmall.Get().(*[chunkSmall]byte)[:]
	case n <= chunkMedium:
		return poolMedium.Get().(*[chunkMedium]byte)[:]
	}
	return poolLarge.Get().(*[chunkLarge]byte)[:]
}

// putChunk returns a buffer from getChunk to its pool.
func putChunk(b []byte) {
	switch cap(b) {
	case chunkSmall:
		poolSmall.Put((*[chunkSmall]byte)(b[:chunkSmall]))
	case chunkMedium:
		poolMedium.Put((*[chunkMedium]byte)(b[:chunkMedium]))
	case chunkLarge:
		poolLarge.Put((*[chunkLarge]byte)(b[:chunkLarge]))
	}
}

// recvBuf holds a stream's received, unread response body bytes in
// pooled chunks. Its size is bounded by the stream's receive window, an
// int32 (Config.StreamWindow). The slice of chunks is made with the first
// byte and kept until free (a reader that keeps up drains and refills its
// one chunk in place): a stream is held per request in flight, and one
// that received nothing yet holds no slice.
type recvBuf struct {
	chunks [][]byte // each chunk's len is its filled part
	r      int32    // read offset in chunks[0]
	n      int32    // unread bytes
}

// write appends p.
func (b *recvBuf) write(p []byte) {
	b.n += int32(len(p))
	for len(p) > 0 { // each pass fills one chunk
		if k := len(b.chunks); k > 0 {
			last := b.chunks[k-1]
			if free := cap(last) - len(last); free > 0 {
				c := copy(last[len(last):cap(last)], p)
				b.chunks[k-1] = last[:len(last)+c]
				p = p[c:]
				continue
			}
		}
		b.chunks = append(b.chunks, getChunk(len(p))[:0])
	}
}

// read moves up to len(p) bytes into p.
func (b *recvBuf) read(p []byte) int {
	n := 0
	for n < len(p) && len(b.chunks) > 0 { // each pass drains one chunk or fills p
		c := b.chunks[0]
		k := copy(p[n:], c[b.r:])
		n += k
		b.r += int32(k)
		if int(b.r) == len(c) {
			putChunk(c)
			b.chunks[0] = nil
			if len(b.chunks) == 1 {
				b.chunks = b.chunks[:0] // the same array for the next write
			} else {
				b.chunks = b.chunks[1:]
			}
			b.r = 0
		}
	}
	b.n -= int32(n)
	return n
}

// free releases every chunk and returns the bytes dropped.
func (b *recvBuf) free() int {
	for i, c := range b.chunks {
		putChunk(c)
		b.chunks[i] = nil
	}
	n := int(b.n)
	*b = recvBuf{}
	return n
}

// recKind says what a written byte range means for a stream's evidence.
type recKind uint8

const (
	recHeaders recKind = iota + 1 // the HEADERS frame that opens the stream
	recData                       // a DATA frame carrying request body
	recEnd                        // the frame carrying END_STREAM (may also be recHeaders or recData)
)

// writeRec locates one stream frame in a batch of writes.
type writeRec struct {
	st    *stream
	off   int // offset of the frame's first byte in the batch
	end   int // offset just past the frame
	kind  recKind
	endSt bool // the frame carries END_STREAM
}

// outBuf is the encoded frames waiting for the writer, with the
// evidence records of the stream frames among them.
type outBuf struct {
	buf  []byte
	recs []writeRec
}

// appendFrameHeader appends the 9-byte frame header (RFC 9113 §4.1).
func appendFrameHeader(b []byte, length int, t http2.FrameType, flags http2.Flags, streamID uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(streamID>>24)&0x7f, byte(streamID>>16), byte(streamID>>8), byte(streamID))
}

func (o *outBuf) settings(s ...http2.Setting) {
	o.buf = appendFrameHeader(o.buf, 6*len(s), http2.FrameSettings, 0, 0)
	for _, x := range s {
		o.buf = binary.BigEndian.AppendUint16(o.buf, uint16(x.ID))
		o.buf = binary.BigEndian.AppendUint32(o.buf, x.Val)
	}
}

func (o *outBuf) settingsAck() {
	o.buf = appendFrameHeader(o.buf, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
}

func (o *outBuf) ping(ack bool, data [8]byte) {
	var flags http2.Flags
	if ack {
		flags = http2.FlagPingAck
	}
	o.buf = appendFrameHeader(o.buf, 8, http2.FramePing, flags, 0)
	o.buf = append(o.buf, data[:]...)
}

func (o *outBuf) windowUpdate(id uint32, incr uint32) {
	o.buf = appendFrameHeader(o.buf, 4, http2.FrameWindowUpdate, 0, id)
	o.buf = binary.BigEndian.AppendUint32(o.buf, incr&0x7fffffff)
}

func (o *outBuf) rstStream(id uint32, code http2.ErrCode) {
	o.buf = appendFrameHeader(o.buf, 4, http2.FrameRSTStream, 0, id)
	o.buf = binary.BigEndian.AppendUint32(o.buf, uint32(code))
}

func (o *outBuf) goAway(last uint32, code http2.ErrCode, debug string) {
	o.buf = appendFrameHeader(o.buf, 8+len(debug), http2.FrameGoAway, 0, 0)
	o.buf = binary.BigEndian.AppendUint32(o.buf, last&0x7fffffff)
	o.buf = binary.BigEndian.AppendUint32(o.buf, uint32(code))
	o.buf = append(o.buf, debug...)
}

// data appends one DATA frame for st and its evidence record.
func (o *outBuf) data(st *stream, p []byte, endStream bool) {
	var flags http2.Flags
	kind := recData
	if endStream {
		flags = http2.FlagDataEndStream
	}
	off := len(o.buf)
	o.buf = appendFrameHeader(o.buf, len(p), http2.FrameData, flags, st.id)
	o.buf = append(o.buf, p...)
	o.recs = append(o.recs, writeRec{st: st, off: off, end: len(o.buf), kind: kind, endSt: endStream})
}

// headerBlock appends a header block as a HEADERS frame and as many
// CONTINUATION frames as maxFrame requires, and its evidence record
// (kind recHeaders for the request's header section, recEnd for
// trailers).
func (o *outBuf) headerBlock(st *stream, block []byte, endStream bool, maxFrame int, kind recKind) {
	off := len(o.buf)
	first := true
	for first || len(block) > 0 { // each pass writes up to maxFrame bytes
		chunk := block[:min(len(block), maxFrame)]
		block = block[len(chunk):]
		var flags http2.Flags
		if len(block) == 0 {
			flags |= http2.FlagHeadersEndHeaders // same bit for CONTINUATION
		}
		t := http2.FrameContinuation
		if first {
			t = http2.FrameHeaders
			if endStream {
				flags |= http2.FlagHeadersEndStream
			}
		}
		o.buf = appendFrameHeader(o.buf, len(chunk), t, flags, st.id)
		o.buf = append(o.buf, chunk...)
		first = false
	}
	o.recs = append(o.recs, writeRec{st: st, off: off, end: len(o.buf), kind: kind, endSt: endStream})
}

// reset empties o. It keeps its memory while the connection is busy
// (frames queued or streams open), up to 1 MiB; an idle connection keeps
// at most 16 KiB.
func (o *outBuf) reset(busy bool) {
	keep := 16 << 10
	if busy {
		keep = 1 << 20
	}
	if cap(o.buf) > keep {
		o.buf = nil
	} else {
		o.buf = o.buf[:0]
	}
	clear(o.recs)
	if cap(o.recs) > 1024 {
		o.recs = nil
	} else {
		o.recs = o.recs[:0]
	}
}
