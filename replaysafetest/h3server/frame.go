package h3server

import (
	"errors"
	"fmt"
	"io"

	"github.com/quic-go/quic-go/quicvarint"
)

// HTTP/3 frame types (RFC 9114 §7.2).
const (
	frameData     = 0x00
	frameHeaders  = 0x01
	frameSettings = 0x04
	frameGoAway   = 0x07
)

// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
const (
	streamTypeControl      = 0x00
	streamTypeQPACKEncoder = 0x02
	streamTypeQPACKDecoder = 0x03
)

// SETTINGS parameters the server sends (RFC 9204 §5).
const (
	settingQPACKMaxTableCapacity = 0x01
	settingQPACKBlockedStreams   = 0x07
)

// Size bounds on what the server reads.
const (
	maxFieldSection = 1 << 20 // the largest HEADERS payload the server decodes
	maxSettings     = 1 << 14 // the largest SETTINGS payload the server parses
	maxDataFrame    = 1 << 14 // the largest DATA frame the server writes
	readChunk       = 32 << 10
)

// frameHeader is the type and payload length that open every frame.
type frameHeader struct {
	Type, Length uint64
}

// errFrameTruncated says the stream ended inside a frame.
var errFrameTruncated = errors.New("stream ended inside a frame")

// readFrameHeader reads a frame's type and length. It returns io.EOF only
// when the stream ends cleanly before the frame.
func readFrameHeader(r quicvarint.Reader) (frameHeader, error) {
	t, err := quicvarint.Read(r)
	if err != nil {
		return frameHeader{}, err
	}
	l, err := quicvarint.Read(r)
	if err != nil {
		return frameHeader{}, truncated(err)
	}
	return frameHeader{Type: t, Length: l}, nil
}

// truncated turns an end of stream inside a frame into errFrameTruncated.
func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errFrameTruncated
	}
	return err
}

// readPayload reads a whole frame payload of at most limit bytes.
func readPayload(r io.Reader, h frameHeader, limit uint64) ([]byte, error) {
	if h.Length > limit {
		return nil, fmt.Errorf("frame type %#x of %d bytes, more than %d", h.Type, h.Length, limit)
	}
	b := make([]byte, h.Length)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, truncated(err)
	}
	return b, nil
}

// appendFrame appends a frame with the given type and payload.
func appendFrame(b []byte, typ uint64, payload []byte) []byte {
	b = quicvarint.Append(b, typ)
	b = quicvarint.Append(b, uint64(len(payload)))
	return append(b, payload...)
}

// appendSettings appends a SETTINGS frame.
func appendSettings(b []byte, settings []Setting) []byte {
	var p []byte
	for _, s := range settings {
		p = quicvarint.Append(p, s.ID)
		p = quicvarint.Append(p, s.Value)
	}
	return appendFrame(b, frameSettings, p)
}

// parseSettings parses a SETTINGS payload.
func parseSettings(p []byte) ([]Setting, error) {
	var out []Setting
	for len(p) > 0 {
		id, n, err := quicvarint.Parse(p)
		if err != nil {
			return out, fmt.Errorf("SETTINGS: %w", err)
		}
		p = p[n:]
		v, n, err := quicvarint.Parse(p)
		if err != nil {
			return out, fmt.Errorf("SETTINGS: %w", err)
		}
		p = p[n:]
		out = append(out, Setting{ID: id, Value: v})
	}
	return out, nil
}

// parseGoAway parses a GOAWAY payload: one varint.
func parseGoAway(p []byte) (uint64, error) {
	id, n, err := quicvarint.Parse(p)
	if err != nil || n != len(p) {
		return 0, fmt.Errorf("GOAWAY: malformed payload of %d bytes", len(p))
	}
	return id, nil
}
