package h2

import (
	"io"

	"golang.org/x/net/http2"
)

// frameSource is what the Framer reads from: the connection's reader,
// remembering its last error. x/net's Framer reports a frame too short
// for its own fields (a padded DATA frame with no room for its pad
// length, say) as io.ErrUnexpectedEOF, like a connection that ended in
// the middle of a frame; only the reader knows which it was.
type frameSource struct {
	r   io.Reader
	err error
}

func (s *frameSource) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil {
		s.err = err
	}
	return n, err
}

// readFrame reads one frame from fr, which reads from src. A frame the
// Framer could not parse because it is too short is reported as a
// FRAME_SIZE_ERROR connection error (RFC 9113 §4.2).
func readFrame(fr *http2.Framer, src *frameSource) (http2.FrameHeader, http2.Frame, error) {
	fh, err := fr.ReadFrameHeader()
	if err != nil {
		return fh, nil, err
	}
	f, err := fr.ReadFrameForHeader(fh)
	if err == io.ErrUnexpectedEOF && src.err == nil {
		err = http2.ConnectionError(http2.ErrCodeFrameSize)
	}
	return fh, f, err
}
