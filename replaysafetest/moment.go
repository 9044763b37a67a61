package replaysafetest

import "net/http"

// Moment says when in a stream's life a server carries out its action
// (HTTP/2 and HTTP/3: h2server and h3server).
type Moment uint8

// Moments.
const (
	// AfterBody acts once the request is complete: the end of the stream
	// arrived (on the HEADERS, the last DATA frame or the trailers). The
	// zero value.
	AfterBody Moment = iota // after-body
	// OnHeaders acts as soon as the request's header block arrives,
	// before any of its body is read.
	OnHeaders // on-headers
)

// momentCount is the number of valid values of Moment.
const momentCount = int(OnHeaders) + 1

// Valid reports whether m is one of the defined moments.
func (m Moment) Valid() bool { return int(m) < momentCount }

// Informational is an interim (1xx) response a stream server sends
// before its final one.
type Informational struct {
	// Status is the 1xx status code, such as 103.
	Status int
	// Header holds its header fields, written lower-cased in sorted key
	// order.
	Header http.Header
}
