package h2_test

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

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

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
	"github.com/replaysafe/replaysafe/fsm"
)

type timeoutErr struct{ timeout bool }

func (e timeoutErr) Error() string   { return "timeout?" }
func (e timeoutErr) Timeout() bool   { return e.timeout }
func (e timeoutErr) Temporary() bool { return true }

func wrap(err error) error { return fmt.Errorf("layer: %w", err) }

func TestClassifyTable(t *testing.T) {
	readErr := func(err error) error { return &net.OpError{Op: "read", Net: "tcp", Err: err} }
	for _, tc := range []struct {
		name string
		err  error
		want fsm.EventKind
	}{
		{"nil", nil, fsm.EventInvalid},
		{"canceled", context.Canceled, fsm.EventCanceled},
		{"canceled-wrapped", wrap(context.Canceled), fsm.EventCanceled},
		{"deadline", context.DeadlineExceeded, fsm.EventTimeout},
		{"refused", http2.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream}, fsm.EventRefusedStream},
		{"refused-wrapped", wrap(http2.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream}), fsm.EventRefusedStream},
		{"stream-internal", http2.StreamError{StreamID: 3, Code: http2.ErrCodeInternal}, fsm.EventReset},
		{"stream-protocol-local", http2.StreamError{StreamID: 3, Code: http2.ErrCodeProtocol, Cause: errors.New("malformed")}, fsm.EventReset},
		{"stream-cancel", http2.StreamError{StreamID: 3, Code: http2.ErrCodeCancel}, fsm.EventReset},
		{"goaway", http2.GoAwayError{LastStreamID: 1}, fsm.EventH2GoAway},
		{"connection-error", http2.ConnectionError(http2.ErrCodeProtocol), fsm.EventReset},
		{"no-cached-conn", http2.ErrNoCachedConn, fsm.EventAcquireFailed},
		{"tls-alert-received", &net.OpError{Op: "remote error", Err: errors.New("tls: bad record MAC")}, fsm.EventTLSFailure},
		{"tls-alert-sent", &net.OpError{Op: "local error", Err: errors.New("tls: bad record MAC")}, fsm.EventTLSFailure},
		{"tls-alert-error", tls.AlertError(20), fsm.EventTLSFailure},
		{"tls-record-header", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, fsm.EventTLSFailure},
		{"deadline-conn", readErr(os.ErrDeadlineExceeded), fsm.EventTimeout},
		{"timeout-method", timeoutErr{timeout: true}, fsm.EventTimeout},
		{"not-a-timeout", timeoutErr{timeout: false}, fsm.EventClosed},
		{"econnreset", readErr(os.NewSyscallError("read", syscall.ECONNRESET)), fsm.EventReset},
		{"econnaborted", syscall.ECONNABORTED, fsm.EventReset},
		{"epipe", &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, fsm.EventReset},
		{"eof", io.EOF, fsm.EventClosed},
		{"unexpected-eof", io.ErrUnexpectedEOF, fsm.EventClosed},
		{"net-closed", wrap(net.ErrClosed), fsm.EventClosed},
		{"unknown", errors.New("http2: Transport received Server's graceful shutdown GOAWAY"), fsm.EventClosed},
		{"goaway-text-is-not-evidence", errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1"), fsm.EventClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := h2.Classify(tc.err, 5).Kind; got != tc.want {
				t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestClassifyGoAwayCarriesBothStreamIDs(t *testing.T) {
	ev := h2.Classify(wrap(http2.GoAwayError{LastStreamID: 7, ErrCode: http2.ErrCodeNo}), 9)
	want := fsm.Event{Kind: fsm.EventH2GoAway, Boundary: 7, Stream: 9}
	if ev != want {
		t.Fatalf("got %v, want %v", ev, want)
	}
	// Unknown stream: the boundary alone proves nothing.
	if ev := h2.Classify(http2.GoAwayError{LastStreamID: 7}, 0); ev.Stream != 0 || ev.Boundary != 7 {
		t.Fatalf("got %v", ev)
	}
}

func TestStreamOf(t *testing.T) {
	if id, ok := h2.StreamOf(wrap(http2.StreamError{StreamID: 11, Code: http2.ErrCodeRefusedStream})); !ok || id != 11 {
		t.Errorf("StreamOf = %d, %v", id, ok)
	}
	if _, ok := h2.StreamOf(http2.GoAwayError{}); ok {
		t.Error("StreamOf(GoAwayError) reported a stream")
	}
}
