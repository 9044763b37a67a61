// Package kit holds the harness the scripted servers of replaysafetest
// share: the Core every server runs on (records, waiters, admission of
// connections, lifetime, Close), the defaults and bounds, header and
// error helpers, and TLS set-up.
package kit

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
)

// Bounds of an endless interim (1xx) flood, so that a test always ends.
const (
	// EndlessMaxResponses is the most interim responses one flood sends.
	EndlessMaxResponses = 1 << 20
	// EndlessMaxDuration is the longest one flood lasts.
	EndlessMaxDuration = 10 * time.Second
)

// Default sets *p to v when *p is zero or negative: how every Config
// field with a default is filled.
func Default[T ~int | ~int64](p *T, v T) {
	if *p <= 0 {
		*p = v
	}
}

// Map returns f of every element of in, in order.
func Map[A, B any](in []A, f func(A) B) []B {
	out := make([]B, len(in))
	for i, a := range in {
		out[i] = f(a)
	}
	return out
}

// IsTimeout reports whether err is a read or write deadline passing.
func IsTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// ReadFailure names what ended a read, for a partial request's record:
// "timeout", "eof", "unexpected eof", "connection reset", or err itself.
func ReadFailure(err error) string {
	switch {
	case IsTimeout(err):
		return "timeout"
	case errors.Is(err, io.EOF):
		return "eof"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected eof"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	}
	return err.Error()
}

// Offset returns stream+delta clamped to [0, max]: a GOAWAY boundary
// given relative to the stream an action handles.
func Offset(stream uint64, delta int64, max uint64) uint64 {
	switch {
	case delta < 0 && uint64(-delta) > stream:
		return 0
	case delta > 0 && uint64(delta) > max-stream:
		return max
	}
	return uint64(int64(stream) + delta)
}

// AppendCopy returns list with v added, never sharing list's array (an
// Action's With methods return a new value that must not alias the
// old one's list).
func AppendCopy[T any](list []T, v T) []T {
	return append(list[:len(list):len(list)], v)
}
