package h2_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/fsm"
	conn "github.com/replaysafe/replaysafe/transports/h2"
)

type timeoutErr struct{ timeout bool }

func (e timeoutErr) Error() string   { return "timeout?" }
func (e timeoutErr) Timeout() bool   { return e.timeout }
func (e timeoutErr) Temporary() bool { return true }

func wrap(err error) error { return fmt.Errorf("layer: %w", err) }

// TestClassifyTable: every row of Classify's table, by type and
// identity, wrapped or not.
func TestClassifyTable(t *testing.T) {
	readErr := func(err error) error { return &net.OpError{Op: "read", Net: "tcp", Err: err} }
	limit := &informational.LimitError{Count: 33}
	for _, tc := range []struct {
		name string
		err  error
		want fsm.Event
	}{
		{"nil", nil, fsm.Event{}},
		{"canceled", context.Canceled, fsm.Event{Kind: fsm.EventCanceled}},
		{"canceled-wrapped", wrap(context.Canceled), fsm.Event{Kind: fsm.EventCanceled}},
		{"deadline", context.DeadlineExceeded, fsm.Event{Kind: fsm.EventTimeout}},
		{"unsent-closed", &conn.UnsentError{Cause: conn.ErrClosed}, fsm.Event{Kind: fsm.EventHandedBack}},
		{"unsent-goaway", wrap(&conn.UnsentError{Cause: &conn.GoAwayError{LastStreamID: 1}}), fsm.Event{Kind: fsm.EventHandedBack}},
		{"unsent-write", &conn.UnsentError{Cause: &conn.WriteError{Err: syscall.EPIPE, StreamID: 3}}, fsm.Event{Kind: fsm.EventHandedBack}},
		{"refused", &conn.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream, Remote: true}, fsm.Event{Kind: fsm.EventRefusedStream}},
		{"refused-wrapped", wrap(&conn.StreamError{StreamID: 5, Code: http2.ErrCodeRefusedStream, Remote: true}), fsm.Event{Kind: fsm.EventRefusedStream}},
		{"refused-by-us-is-not-evidence", &conn.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream}, fsm.Event{Kind: fsm.EventMalformed}},
		{"stream-internal", &conn.StreamError{StreamID: 3, Code: http2.ErrCodeInternal, Remote: true}, fsm.Event{Kind: fsm.EventReset}},
		{"stream-cancel", &conn.StreamError{StreamID: 3, Code: http2.ErrCodeCancel, Remote: true}, fsm.Event{Kind: fsm.EventReset}},
		{"stream-protocol-local", &conn.StreamError{StreamID: 3, Code: http2.ErrCodeProtocol, Cause: errors.New("malformed")}, fsm.Event{Kind: fsm.EventMalformed}},
		{"stream-1xx-bound", &conn.StreamError{StreamID: 3, Code: http2.ErrCodeCancel, Cause: limit}, fsm.Event{Kind: fsm.EventMalformed}},
		{"goaway-above", &conn.GoAwayError{LastStreamID: 1, StreamID: 3}, fsm.Event{Kind: fsm.EventH2GoAway, Boundary: 1, Stream: 3}},
		{"goaway-at", wrap(&conn.GoAwayError{LastStreamID: 7, StreamID: 7}), fsm.Event{Kind: fsm.EventH2GoAway, Boundary: 7, Stream: 7}},
		{"goaway-no-stream", &conn.GoAwayError{LastStreamID: 7}, fsm.Event{Kind: fsm.EventClosed}},
		{"request-body", &conn.RequestBodyError{Err: errors.New("producer failed")}, fsm.Event{Kind: fsm.EventLocalFailure}},
		{"request-invalid", &conn.RequestError{Reason: "bad field"}, fsm.Event{Kind: fsm.EventLocalFailure}},
		{"dead-by-ping", &conn.TimeoutError{Kind: conn.TimeoutPing}, fsm.Event{Kind: fsm.EventClosed}},
		{"dead-by-settings", wrap(&conn.TimeoutError{Kind: conn.TimeoutSettings}), fsm.Event{Kind: fsm.EventClosed}},
		{"connection-error", &conn.ConnectionError{Code: http2.ErrCodeProtocol}, fsm.Event{Kind: fsm.EventReset}},
		{"read-eof", &conn.ReadError{Err: io.EOF}, fsm.Event{Kind: fsm.EventClosed}},
		{"read-reset", &conn.ReadError{Err: readErr(os.NewSyscallError("read", syscall.ECONNRESET))}, fsm.Event{Kind: fsm.EventReset}},
		{"write-epipe", &conn.WriteError{Err: &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, StreamID: 3, HeadersWritten: true}, fsm.Event{Kind: fsm.EventReset}},
		{"1xx-bound", limit, fsm.Event{Kind: fsm.EventMalformed}},
		{"tls-alert", tls.AlertError(20), fsm.Event{Kind: fsm.EventTLSFailure}},
		{"deadline-conn", readErr(os.ErrDeadlineExceeded), fsm.Event{Kind: fsm.EventTimeout}},
		{"timeout-method", timeoutErr{timeout: true}, fsm.Event{Kind: fsm.EventTimeout}},
		{"not-a-timeout", timeoutErr{timeout: false}, fsm.Event{Kind: fsm.EventClosed}},
		{"unknown", errors.New("something else"), fsm.Event{Kind: fsm.EventClosed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := h2.Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestFailureContextFirst: the caller's context decides whatever the
// error, and then the 1xx bound, before Classify.
func TestFailureContextFirst(t *testing.T) {
	var a h2.Attempt
	reset := &conn.StreamError{StreamID: 1, Code: http2.ErrCodeInternal, Remote: true}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ev := a.Failure(ctx, reset); ev.Kind != fsm.EventCanceled {
		t.Errorf("canceled context: %v", ev)
	}
	dctx, dcancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer dcancel()
	if ev := a.Failure(dctx, reset); ev.Kind != fsm.EventTimeout {
		t.Errorf("past deadline: %v", ev)
	}
	a.SetInformationalLimit(informational.Limit{Count: 1})
	a.Informational(103, nil, 0)
	if err := a.Informational(103, nil, 0); err == nil {
		t.Fatal("a second 1xx over a bound of one was accepted")
	}
	if ev := a.Failure(context.Background(), reset); ev.Kind != fsm.EventMalformed {
		t.Errorf("over the 1xx bound: %v", ev)
	}
}
