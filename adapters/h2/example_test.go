package h2_test

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
	conn "github.com/replaysafe/replaysafe/transports/h2"
)

func ExampleClassify() {
	for _, err := range []error{
		&conn.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream, Remote: true},
		&conn.GoAwayError{LastStreamID: 1, StreamID: 3},
		&conn.UnsentError{Cause: conn.ErrShutdown},
		&conn.StreamError{StreamID: 3, Code: http2.ErrCodeInternal, Remote: true},
		&conn.ReadError{Err: io.ErrUnexpectedEOF},
		errors.New("something the connection does not type"),
	} {
		fmt.Println(h2.Classify(err))
	}
	// Output:
	// @0s refused-stream
	// @0s h2-goaway last=1 stream=3
	// @0s handed-back
	// @0s reset
	// @0s closed
	// @0s closed
}
