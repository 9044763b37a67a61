package retrycmp

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=BodyKind -linecomment -output=enum_string.go

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/go-resty/resty/v2"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/replaysafe/replaysafe"
)

// BodyKind says how a request carries its body.
type BodyKind uint8

// Body kinds. The zero value is a request without a body.
const (
	// BodyNone is a request without a body.
	BodyNone BodyKind = iota // none
	// BodyBuffered hands the client the body as a []byte, which every
	// client can send again.
	BodyBuffered // buffered
	// BodyOneShot hands the client the body as an io.Reader that is
	// neither a *bytes.Reader nor a *strings.Reader, with its length
	// known: a streaming upload, which no client can rewind.
	BodyOneShot // one-shot
)

// Request is one call a Client sends.
type Request struct {
	// Method is the request method.
	Method string
	// URL is the absolute URL.
	URL string
	// Body says how Payload is handed to the client.
	Body BodyKind
	// Payload is the body's bytes; ignored with BodyNone.
	Payload []byte
	// Header holds extra request header fields, or nil.
	Header http.Header
}

// Outcome is how one call ended: a final status, or an error.
type Outcome struct {
	// Status is the final status code, 0 when the call failed.
	Status int
	// Err is the call's error, nil when a response arrived.
	Err error
}

// Sender is one client instance with its own connection pool. Send makes
// one call and reads the whole response; Close closes the idle
// connections. A Sender is used by one run at a time.
type Sender interface {
	Send(ctx context.Context, req Request) Outcome
	Close()
}

// Client is an HTTP client under comparison: a name for the tables and a
// constructor of fresh instances, so that runs never share a connection
// pool (a client that closes its idle connections after a failure, as
// retryablehttp does, would otherwise disturb the runs beside it).
type Client struct {
	// Name labels the client's rows: the library and its retry setting.
	Name string
	// New returns a fresh instance.
	New func() Sender
}

// Peers returns the clients the comparison measures by default, in table
// order: net/http, replaysafe with default options, go-retryablehttp with
// its defaults, resty with its defaults and resty with SetRetryCount(3).
func Peers() []Client {
	return []Client{NetHTTP(), Replaysafe(), ReplaysafeRetry(), RetryableHTTP(), Resty(), RestyRetry(3)}
}

// HTTPClient returns a Client whose instances are the *http.Client that
// newClient returns, sending each call with Do. Pass a client built on
// replaysafe's Transport with other Options to add it to the comparison.
func HTTPClient(name string, newClient func() *http.Client) Client {
	return Client{Name: name, New: func() Sender { return stdSender{newClient()} }}
}

// NetHTTP is net/http's default client: an http.Client with a clone of
// http.DefaultTransport (its own pool, the default's settings).
func NetHTTP() Client {
	return HTTPClient("net/http", func() *http.Client {
		return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	})
}

// Replaysafe is an http.Client on replaysafe's Transport with the zero
// Options: the automatic resend only, no configured retries.
func Replaysafe() Client {
	return HTTPClient("replaysafe", func() *http.Client {
		return &http.Client{Transport: replaysafe.New(replaysafe.Options{})}
	})
}

// ReplaysafeRetry is replaysafe's Transport with configured retries: five
// attempts at most, as retryablehttp's default of one try and four
// retries, and the default statuses, backoff and budget.
func ReplaysafeRetry() Client {
	return HTTPClient("replaysafe Retry{MaxAttempts: 5}", func() *http.Client {
		return &http.Client{Transport: replaysafe.New(replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 5}})}
	})
}

// stdSender sends through an *http.Client.
type stdSender struct{ c *http.Client }

func (s stdSender) Send(ctx context.Context, req Request) Outcome {
	hreq, err := http.NewRequestWithContext(ctx, req.Method, req.URL, bodyReader(req))
	if err != nil {
		return Outcome{Err: err}
	}
	if req.Body == BodyOneShot {
		hreq.ContentLength = int64(len(req.Payload))
	}
	addHeader(hreq.Header, req.Header)
	return finish(s.c.Do(hreq))
}

func (s stdSender) Close() { s.c.CloseIdleConnections() }

// RetryableHTTP is github.com/hashicorp/go-retryablehttp's NewClient with
// its defaults (RetryMax 4, RetryWaitMin 1 s, RetryWaitMax 30 s,
// DefaultRetryPolicy, DefaultBackoff) and its logger off, sending with
// NewRequestWithContext and Do.
func RetryableHTTP() Client {
	return Client{Name: "retryablehttp", New: func() Sender {
		c := retryablehttp.NewClient()
		c.Logger = nil
		return retryableSender{c}
	}}
}

// retryableSender sends through a retryablehttp.Client.
type retryableSender struct{ c *retryablehttp.Client }

func (s retryableSender) Send(ctx context.Context, req Request) Outcome {
	// retryablehttp takes the body as an interface{} and switches on its
	// type: a []byte stays as it is, any other io.Reader is read into
	// memory before the first attempt (getBodyReaderAndContentLength).
	var body any
	switch req.Body {
	case BodyBuffered:
		body = req.Payload
	case BodyOneShot:
		body = bodyReader(req)
	}
	rreq, err := retryablehttp.NewRequestWithContext(ctx, req.Method, req.URL, body)
	if err != nil {
		return Outcome{Err: err}
	}
	addHeader(rreq.Header, req.Header)
	return finish(s.c.Do(rreq))
}

func (s retryableSender) Close() { s.c.HTTPClient.CloseIdleConnections() }

// Resty is github.com/go-resty/resty/v2's New with its defaults:
// RetryCount 0, so no retries.
func Resty() Client {
	return Client{Name: "resty", New: func() Sender { return newRestySender(0) }}
}

// RestyRetry is resty's New with SetRetryCount(count) and nothing else:
// the default retry conditions (a request error; no status) and waits
// (100 ms growing to at most 2 s, jittered).
func RestyRetry(count int) Client {
	return Client{Name: "resty SetRetryCount(" + strconv.Itoa(count) + ")", New: func() Sender { return newRestySender(count) }}
}

// restySender sends through a resty.Client.
type restySender struct{ c *resty.Client }

func newRestySender(retries int) restySender {
	c := resty.New().SetLogger(quietLogger{})
	if retries > 0 {
		c.SetRetryCount(retries)
	}
	return restySender{c}
}

func (s restySender) Send(ctx context.Context, req Request) Outcome {
	r := s.c.R().SetContext(ctx)
	switch req.Body {
	case BodyBuffered:
		r.SetBody(req.Payload)
	case BodyOneShot:
		r.SetBody(bodyReader(req))
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	resp, err := r.Execute(req.Method, req.URL)
	if err != nil {
		return Outcome{Err: err}
	}
	return Outcome{Status: resp.StatusCode()}
}

func (s restySender) Close() { s.c.GetClient().CloseIdleConnections() }

// quietLogger drops resty's log lines (a warning per failed attempt).
type quietLogger struct{}

func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Warnf(string, ...any)  {}
func (quietLogger) Debugf(string, ...any) {}

// oneShot is a reader no client recognises as in memory: it cannot be
// rewound, sought or asked for its length.
type oneShot struct{ r io.Reader }

func (o *oneShot) Read(p []byte) (int, error) { return o.r.Read(p) }

// bodyReader returns req's body as the reader its kind calls for, or nil.
func bodyReader(req Request) io.Reader {
	switch req.Body {
	case BodyBuffered:
		return bytes.NewReader(req.Payload)
	case BodyOneShot:
		return &oneShot{bytes.NewReader(req.Payload)}
	}
	return nil
}

func addHeader(dst, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// finish reads resp's body to the end and closes it.
func finish(resp *http.Response, err error) Outcome {
	if err != nil {
		return Outcome{Err: err}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	err = errors.Join(err, resp.Body.Close())
	if err != nil {
		return Outcome{Err: err}
	}
	return Outcome{Status: resp.StatusCode}
}
