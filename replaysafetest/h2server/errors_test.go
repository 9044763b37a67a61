package h2server_test

//lint:file-ignore SA1019 the GOAWAY predicate reads x/net/http2's GoAwayError, as xnet_test.go does; DESIGN.md "Dependencies" chose x/net/http2 directly.

import (
	"errors"
	"io"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kittest"
)

// The error predicates the tests expect of a client: what a reset
// stream, a GOAWAY, a FIN or an RST look like from the other side.

// isEOF reports whether err is the server closing with a FIN.
func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// isReset reports whether err is the server closing with an RST.
var isReset = kittest.IsReset

func streamCode(code http2.ErrCode) func(error) bool {
	return func(err error) bool {
		var se http2.StreamError
		return errors.As(err, &se) && se.Code == code && se.StreamID == 1
	}
}

func goAwayLast(last uint32) func(error) bool {
	return func(err error) bool {
		var ge http2.GoAwayError
		return errors.As(err, &ge) && ge.LastStreamID == last
	}
}

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func either(a, b func(error) bool) func(error) bool {
	return func(err error) bool { return a(err) || b(err) }
}
