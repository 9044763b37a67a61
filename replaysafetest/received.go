package replaysafetest

import (
	"bytes"
	"net/http"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

// Received is one request as the server received it.
type Received struct {
	// Conn is the connection's index in accept order, from 0.
	Conn int
	// Seq is the request's position on its connection, from 0. Complete
	// and partial requests share the numbering.
	Seq int
	// Method, Target and Proto are the request line's three parts; empty
	// in a partial request that ended before them.
	Method, Target, Proto string
	// Header holds the parsed header fields (canonical keys).
	Header http.Header
	// Trailer holds the trailer fields of a chunked body, or nil.
	Trailer http.Header
	// Body is the body with any chunked coding removed.
	Body []byte
	// Raw is the request exactly as received, framing and all. For a
	// partial request it is everything received from its first byte.
	Raw []byte
	// Partial marks a request that never completed: the connection
	// closed or timed out mid-request, the request was malformed or too
	// large, or the server closed the connection with it unread.
	Partial bool
	// Err says why a partial request is partial; empty when complete.
	Err string
}

func (r Received) clone() Received {
	r.Header, r.Trailer, r.Body = kit.CloneMessage(r.Header, r.Trailer, r.Body)
	r.Raw = bytes.Clone(r.Raw)
	return r
}
