package h2server_test

import (
	"errors"
	"io"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kittest"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// The error predicates the tests expect of a client: what a reset
// stream, a GOAWAY, a FIN or an RST look like from the other side.

// isEOF reports whether err is the server closing with a FIN.
func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// isReset reports whether err is the server closing with an RST.
var isReset = kittest.IsReset

func streamCode(code http2.ErrCode) func(error) bool {
	return func(err error) bool {
		var se *h2.StreamError
		return errors.As(err, &se) && se.Remote && se.Code == code && se.StreamID == 1
	}
}

func goAwayLast(last uint32) func(error) bool {
	return func(err error) bool {
		var ge *h2.GoAwayError
		return errors.As(err, &ge) && ge.LastStreamID == last
	}
}

// readErr reports whether err is the connection's read failing with
// target (io.EOF: the server closed with a FIN).
func readErr(target error) func(error) bool {
	return func(err error) bool {
		var re *h2.ReadError
		return errors.As(err, &re) && errors.Is(re.Err, target)
	}
}

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func either(a, b func(error) bool) func(error) bool {
	return func(err error) bool { return a(err) || b(err) }
}
