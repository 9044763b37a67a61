package kit

import (
	"net"
	"syscall"
	"testing"
)

// flakyListener fails its first Accepts as a process out of descriptors
// does, then accepts one real connection, then reports itself closed.
type flakyListener struct {
	net.Listener
	fails int
	done  bool
}

func (l *flakyListener) Accept() (net.Conn, error) {
	switch {
	case l.fails > 0:
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	case l.done:
		return nil, net.ErrClosed
	}
	l.done = true
	return l.Listener.Accept()
}

func TestAcceptTCPGoesOnAfterTransientFailures(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var logged, admitted int
	fl := &flakyListener{Listener: ln, fails: 3}
	AcceptTCP(fl, make(chan struct{}), func(string, ...any) { logged++ }, func(tcp *net.TCPConn) bool {
		admitted++
		tcp.Close()
		return true
	})
	if logged != 3 || admitted != 1 {
		t.Fatalf("%d failures logged, %d connections admitted; want 3 and 1", logged, admitted)
	}
}

func TestAcceptTCPStopsWhenDone(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	close(done)
	calls := 0
	AcceptTCP(&flakyListener{Listener: ln, fails: 1}, done, func(string, ...any) { calls++ }, func(*net.TCPConn) bool {
		t.Error("admitted after done")
		return false
	})
	if calls != 0 {
		t.Fatalf("a failure after done was logged %d times", calls)
	}
}
