package conformance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Body kinds a target request can carry.
type Body int

// Bodies.
const (
	NoBody   Body = iota // no body
	Buffered             // "hello" from a strings.Reader: GetBody is set
	OneShot              // "hello" from a reader net/http cannot rewind, ContentLength 5
)

// oneShot is a reader net/http does not recognise as in memory, so the
// request has no GetBody.
type oneShot struct{ r io.Reader }

func (o *oneShot) Read(p []byte) (int, error) { return o.r.Read(p) }

func (e *Env) url(path string) string { return e.Server.URL() + path }

// parseBody reads a step's body argument: none, buffered or oneshot.
func parseBody(s string) (Body, error) {
	switch s {
	case "none":
		return NoBody, nil
	case "buffered":
		return Buffered, nil
	case "oneshot":
		return OneShot, nil
	}
	return 0, fmt.Errorf("body %q: want none, buffered or oneshot", s)
}

// newRequest builds a request to path.
func (e *Env) newRequest(ctx context.Context, method, path string, body Body, header ...string) (*http.Request, error) {
	var r io.Reader
	switch body {
	case Buffered:
		r = strings.NewReader("hello")
	case OneShot:
		r = &oneShot{strings.NewReader("hello")}
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url(path), r)
	if err != nil {
		return nil, err
	}
	if body == OneShot {
		req.ContentLength = 5
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req, nil
}
