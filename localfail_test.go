package replaysafe_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

// TestGetBodyFailureIsLocal: a PUT whose connection closes under it may
// be resent (RS20), but its GetBody fails: the call fails by the
// local-failure rule (RS21) with one prefix, and the error keeps both
// causes, GetBody's and the wire's. The server received one copy.
func TestGetBodyFailureIsLocal(t *testing.T) {
	s := start(t, crossing(replaysafetest.CloseFIN))
	tr, _ := client(t, s, replaysafe.Options{})
	get(t, tr, s, "/warm")
	boom := errors.New("body store unavailable")
	req := newRequest(t, t.Context(), "PUT", s.URL()+"/target", "hello")
	req.GetBody = func() (io.ReadCloser, error) { return nil, boom }
	_, _, err := roundTrip(tr, req)
	wantRule(t, err, fsm.RuleLocalFailure, 1)
	if !errors.Is(err, boom) || !errors.Is(err, io.EOF) {
		t.Errorf("error %v does not wrap both GetBody's error and io.EOF", err)
	}
	if n := strings.Count(err.Error(), "replaysafe:"); n != 1 {
		t.Errorf("%q has %d prefixes", err, n)
	}
	wantCopies(t, s, "/target", 1)
}

// failingBody returns its data, then err.
type failingBody struct {
	data string
	err  error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.data == "" {
		return 0, b.err
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *failingBody) Close() error { return nil }

// TestBodyReadFailureIsLocal: the caller's request body failing in Read
// fails the call by RS21, never resent, over HTTP/2 (HTTP/1.1:
// TestRequestBodyErrorIsLocal); the error wraps the body's error, and the
// server never saw the request end.
func TestBodyReadFailureIsLocal(t *testing.T) {
	broken := errors.New("producer failed")
	t.Run("h2", func(t *testing.T) {
		s := startH2(t, h2Script())
		tr, obs := h2Client(t, s, replaysafe.Options{})
		req := newRequest(t, t.Context(), "PUT", s.URL()+"/up", "")
		req.Body = &failingBody{data: "part", err: broken}
		req.GetBody = nil
		_, _, err := roundTrip(tr, req)
		wantRule(t, err, fsm.RuleLocalFailure, 1)
		if !errors.Is(err, broken) {
			t.Errorf("error %v does not wrap the body's error", err)
		}
		wantDecisions(t, obs, "/up", fsm.RuleLocalFailure)
		for _, r := range h2Copies(s, "/up") {
			if r.EndStream {
				t.Errorf("the server saw a complete request: %+v", r)
			}
		}
	})
}

// TestErrorOnePrefix: an *Error whose cause is one of this package's own
// errors says "replaysafe:" once.
func TestErrorOnePrefix(t *testing.T) {
	e := &replaysafe.Error{Rule: fsm.RuleAcquireFailed, Attempts: 1,
		Err: &replaysafe.ProxyError{Hop: 2, Err: errors.New("refused")}}
	if got, want := e.Error(), "replaysafe: proxy hop 2: refused (RS04 acquire-failed, 1 attempt)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
