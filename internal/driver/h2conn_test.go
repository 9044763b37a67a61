package driver

//lint:file-ignore SA1019 the test drives x/net/http2's ClientConn, as h2pool.go does.

import (
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/adapters/h2"
)

// TestH2ReserveRefusalReason: a connection whose server has not sent its
// SETTINGS refuses a second attempt, and says, when asked after the
// refusal, that it refused for the SETTINGS even when they arrived in
// between: the pool then waits a moment and takes the room they gave,
// where a connection that looked full would make it dial another (a
// burst of 1,200 GETs, at most 1,000 on a connection, sometimes opened a
// third connection for the last 200 so, under the race detector). At
// h2.MaxConcurrentStreams attempts it refuses as full, not pending.
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
	oc, wire := h2.Observe(cl)
	cc, err := (&http2.Transport{}).NewClientConn(oc)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	c := &h2Conn{cc: cc, wire: wire}
	if c.reserveAt(1) { // the dialing attempt runs
		t.Fatal("a second attempt took a stream before the server's SETTINGS")
	}
	if err := http2.NewFramer(srv, nil).WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100}); err != nil {
		t.Fatal(err)
	}
	for i := 0; !wire.Settled(); i++ {
		if i == 500 {
			t.Fatal("the Wire did not see x/net settle within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := cc.State(); st.MaxConcurrentStreams != 100 {
		t.Fatalf("settled, but x/net's State says %d streams, not the server's 100", st.MaxConcurrentStreams)
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
	if c.reserveAt(h2.MaxConcurrentStreams) || c.Pending() {
		t.Errorf("at %d attempts: reserve or pending reports true", h2.MaxConcurrentStreams)
	}
}
