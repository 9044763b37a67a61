package netclass_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"os"
	"syscall"
	"testing"

	"github.com/replaysafe/replaysafe/adapters/netclass"
	"github.com/replaysafe/replaysafe/fsm"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	opErr := func(err error) error {
		return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", err)}
	}
	for _, tc := range []struct {
		err  error
		want fsm.EventKind
	}{
		{io.EOF, fsm.EventClosed},
		{fmt.Errorf("net/http: Transport failed to read from server: %w", io.EOF), fsm.EventClosed},
		{io.ErrUnexpectedEOF, fsm.EventClosed},
		{net.ErrClosed, fsm.EventClosed},
		{opErr(syscall.ECONNRESET), fsm.EventReset},
		{opErr(syscall.EPIPE), fsm.EventReset},
		{opErr(syscall.ECONNABORTED), fsm.EventReset},
		{tls.AlertError(80), fsm.EventTLSFailure},
		{fmt.Errorf("x: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), fsm.EventTLSFailure},
		{&tls.CertificateVerificationError{Err: errors.New("bad")}, fsm.EventTLSFailure},
		{context.Canceled, fsm.EventCanceled},
		{context.DeadlineExceeded, fsm.EventTimeout},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, fsm.EventTimeout},
		{os.ErrDeadlineExceeded, fsm.EventTimeout},
		{textproto.ProtocolError("malformed MIME header line"), fsm.EventMalformed},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: bad record MAC")}, fsm.EventTLSFailure},
	} {
		got, ok := netclass.Classify(tc.err)
		if !ok || got != tc.want {
			t.Errorf("Classify(%v) = %v, %v; want %v", tc.err, got, ok, tc.want)
		}
	}
	for _, err := range []error{nil, errors.New("EOF"), errors.New("connection reset by peer")} {
		if k, ok := netclass.Classify(err); ok {
			t.Errorf("Classify(%v) = %v; want no classification (never by text)", err, k)
		}
	}
}
