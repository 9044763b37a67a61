package replaysafe_test

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/transports/h2"
)

// wantBodyCut reads resp's body to its failure and checks the error: a
// *replaysafe.Error naming the rule that decided the attempt, RS02 (the
// response was delivered: a failure after it only discards the
// connection, and nothing goes again), after one attempt, wrapping the
// stack's error so that errors.As and errors.Is find it too (want). A
// second Read returns the same error.
func wantBodyCut(t *testing.T, resp *http.Response, want func(error) bool) {
	t.Helper()
	defer resp.Body.Close()
	_, err := io.ReadAll(resp.Body)
	var e *replaysafe.Error
	if !errors.As(err, &e) || e.Rule != fsm.RuleDeliverFinalResponse || e.Attempts != 1 {
		t.Fatalf("body read: %v (%T), want a *replaysafe.Error (RS02, 1 attempt)", err, err)
	}
	if !want(err) {
		t.Errorf("body read: %v does not wrap the stack's error", err)
	}
	if _, again := resp.Body.Read(make([]byte, 1)); again != err {
		t.Errorf("second Read: %v, want the same error", again)
	}
}

// TestBodyCutNamesItsRuleH1: an HTTP/1.1 response whose connection closes
// after 4 of its 100 body bytes. The body's Read fails with an *Error
// naming RS02 and wrapping io.ErrUnexpectedEOF; the server got one copy.
func TestBodyCutNamesItsRuleH1(t *testing.T) {
	s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(
		replaysafetest.RawThenClose("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf", replaysafetest.CloseFIN))}})
	tr, _ := client(t, s, replaysafe.Options{Protocol: replaysafe.ProtocolHTTP1})
	resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL()+"/cut", ""))
	if err != nil {
		t.Fatal(err)
	}
	wantBodyCut(t, resp, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) })
	wantCopies(t, s, "/cut", 1)
}

// TestBodyCutNamesItsRuleH2: an HTTP/2 handler that aborts after writing
// part of its body: the server resets the stream (INTERNAL_ERROR). The
// body's Read fails with an *Error naming RS02 and wrapping the
// connection's *h2.StreamError; the handler ran once.
func TestBodyCutNamesItsRuleH2(t *testing.T) {
	var got atomic.Int64
	base := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		io.WriteString(w, "half")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2})
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", base+"/cut", ""))
	if err != nil {
		t.Fatal(err)
	}
	wantBodyCut(t, resp, func(err error) bool {
		var se *h2.StreamError
		return errors.As(err, &se)
	})
	if n := got.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}
