// Package informational bounds the informational (1xx) responses one
// wire attempt accepts, for the HTTP/1.1, HTTP/2 and HTTP/3 adapters.
//
// A client that installs an httptrace Got1xxResponse hook takes over the
// accounting the stacks do for it otherwise: net/http stops counting 1xx
// header bytes against MaxResponseHeaderBytes, and x/net/http2 stops
// counting them against its header list limit. A server sending 103
// forever would then hold the attempt until the caller's deadline and
// make it allocate without limit. A Counter, called from that hook, puts
// the bound back: at most Limit.Count responses and Limit.Bytes header
// bytes in total per attempt, and the hook's error fails the attempt.
package informational

import (
	"errors"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
)

// DefaultCount is the number of informational responses an attempt
// accepts when Limit.Count is zero. A server has reason to send a 100
// Continue and a few 103 Early Hints; 32 leaves room for that and stops
// an endless stream at once. (quic-go's HTTP/3 client stops at 5 on its
// own, whatever the hook says.)
const DefaultCount = 32

// DefaultBytes is the total header bytes of informational responses an
// attempt accepts when Limit.Bytes is zero: 1 MiB, net/http's
// DefaultMaxHeaderBytes.
const DefaultBytes = 1 << 20

// fieldOverhead is what each header field costs beyond its name and
// value, as HTTP/2 and HPACK count a header list (RFC 9113 §6.5.2, RFC
// 7541 §4.1). The status of each response is counted as one field.
const fieldOverhead = 32

// Limit bounds the informational responses of one attempt. A zero field
// takes its default; a negative one is unbounded.
type Limit struct {
	// Count bounds how many informational responses are accepted;
	// zero means DefaultCount.
	Count int
	// Bytes bounds their header bytes in total, each field counted as
	// len(name) + len(value) + 32; zero means DefaultBytes. A transport
	// passes its MaxResponseHeaderBytes, as net/http shares that bound
	// between the 1xx responses and the final one.
	Bytes int64
}

func (l Limit) count() int {
	if l.Count == 0 {
		return DefaultCount
	}
	return l.Count
}

func (l Limit) bytes() int64 {
	if l.Bytes == 0 {
		return DefaultBytes
	}
	return l.Bytes
}

// ErrLimit is wrapped by every *LimitError.
var ErrLimit = errors.New("informational (1xx) responses over the bound")

// LimitError reports an attempt whose informational responses went over
// its Limit. It is the server's fault.
type LimitError struct {
	// Count is the number of informational responses received, the one
	// that crossed the bound included.
	Count int
	// Bytes is their header bytes in total.
	Bytes int64
	// Limit is the bound that was crossed, defaults filled in.
	Limit Limit
	// Status is the status code of the last one.
	Status int
}

// Error says which bound was crossed and by how much.
func (e *LimitError) Error() string {
	last := ""
	if e.Status != 0 {
		last = ", last status " + strconv.Itoa(e.Status)
	}
	if lc := e.Limit.Count; lc >= 0 && e.Count > lc {
		return "server sent " + strconv.Itoa(e.Count) + " informational (1xx) responses, more than the " +
			strconv.Itoa(lc) + " an attempt accepts" + parenthesize(last)
	}
	return "server sent informational (1xx) responses with " + strconv.FormatInt(e.Bytes, 10) +
		" header bytes in total, more than the " + strconv.FormatInt(e.Limit.Bytes, 10) +
		" an attempt accepts (after " + strconv.Itoa(e.Count) + " responses" + last + ")"
}

// parenthesize turns ", x" into " (x)", and "" into "".
func parenthesize(s string) string {
	if s == "" {
		return ""
	}
	return " (" + strings.TrimPrefix(s, ", ") + ")"
}

// Unwrap returns ErrLimit.
func (e *LimitError) Unwrap() error { return ErrLimit }

// Counter counts the informational responses of one attempt against a
// Limit. The zero Counter uses the default Limit. It is safe for
// concurrent use.
type Counter struct {
	mu    sync.Mutex
	lim   Limit
	n     int
	bytes int64
	err   *LimitError
}

// SetLimit replaces the bound; call it before the attempt starts.
func (c *Counter) SetLimit(l Limit) {
	c.mu.Lock()
	c.lim = l
	c.mu.Unlock()
}

// Add counts one informational response with status code and header h.
// It returns a *LimitError once the responses counted so far are over the
// bound, and the same error on every later call.
func (c *Counter) Add(code int, h textproto.MIMEHeader) error {
	size := int64(len(":status") + 3 + fieldOverhead)
	for k, vs := range h {
		for _, v := range vs {
			size += int64(len(k) + len(v) + fieldOverhead)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.n++
	c.bytes += size
	lim := Limit{Count: c.lim.count(), Bytes: c.lim.bytes()}
	if (lim.Count >= 0 && c.n > lim.Count) || (lim.Bytes >= 0 && c.bytes > lim.Bytes) {
		c.err = &LimitError{Count: c.n, Bytes: c.bytes, Limit: lim, Status: code}
		return c.err
	}
	return nil
}

// Err returns the *LimitError Add returned, or nil while the responses
// are within the bound.
func (c *Counter) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return nil
	}
	return c.err
}

// Count returns how many informational responses were counted.
func (c *Counter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
