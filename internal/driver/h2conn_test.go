package driver

import (
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/transports/h2"
)

// TestH2ReserveRefusalReason: a connection whose server has not sent its
// SETTINGS refuses a second attempt, and says, when asked after the
// refusal, that it refused for the SETTINGS even when they arrived in
// between: the pool then waits a moment and takes the room they gave,
// where a connection that looked full would make it dial another (a
// burst of 1,200 GETs, at most 1,000 on a connection, sometimes opened a
// third connection for the last 200 so, under the race detector). At
// the server's limit it refuses as full, not pending.
func TestH2ReserveRefusalReason(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- s
		io.Copy(io.Discard, s) // the preface, SETTINGS and the ack; ends at Close
	}()
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer srv.Close()
	cc, err := h2.NewClientConn(cl, h2.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	c := &h2Conn{cc: cc}
	if c.reserveAt(1) { // the dialing attempt runs
		t.Fatal("a second attempt took a stream before the server's SETTINGS")
	}
	if err := http2.NewFramer(srv, nil).WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-settled(cc):
	case <-time.After(5 * time.Second):
		t.Fatal("the connection did not apply the server's SETTINGS within 5 s")
	}
	if !c.Pending() {
		t.Error("after a refusal for the SETTINGS, pending reports false once they arrived")
	}
	if !c.reserveAt(1) {
		t.Fatal("no stream after the SETTINGS")
	}
	if c.Pending() {
		t.Error("pending after a reservation")
	}
	for c.cc.Reserve() { // fill the connection's room: the server allows 100
	}
	if c.reserveAt(100) || c.Pending() {
		t.Error("at the server's limit: reserve or pending reports true")
	}
}

// settled returns a channel closed once cc applied the server's SETTINGS
// (polled: the connection offers no notification).
func settled(cc *h2.ClientConn) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for !cc.Settled() && !cc.Closed() {
			time.Sleep(time.Millisecond)
		}
	}()
	return ch
}
