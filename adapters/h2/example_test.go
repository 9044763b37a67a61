package h2_test

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
)

func ExampleClassify() {
	for _, err := range []error{
		http2.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream},
		http2.GoAwayError{LastStreamID: 1},
		http2.StreamError{StreamID: 3, Code: http2.ErrCodeInternal},
		io.ErrUnexpectedEOF,
		errors.New("http2: Transport received Server's graceful shutdown GOAWAY"),
	} {
		fmt.Println(h2.Classify(err, 3))
	}
	// Output:
	// @0s refused-stream
	// @0s h2-goaway last=1 stream=3
	// @0s reset
	// @0s closed
	// @0s closed
}
