package forward_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/replaysafe/replaysafe/forward"
)

// wsEchoServer starts a WebSocket server (coder/websocket) that counts
// its handshakes in n and echoes every message, up to 1 MiB.
func wsEchoServer(t *testing.T, n *atomic.Int64) *url.URL {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20) // above the 80 KiB message (the default is 32 KiB)
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, msg); err != nil {
				return
			}
		}
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	return u
}

// TestForwardWebSocketEcho: a real WebSocket client and server
// (github.com/coder/websocket) talk through the forwarder over HTTP/1.1:
// the handshake reaches the upstream once, text and binary messages are
// echoed whole, and the close handshake goes through.
func TestForwardWebSocketEcho(t *testing.T) {
	var handshakes atomic.Int64
	u := wsEchoServer(t, &handshakes)
	fw := forward.New(forward.Options{Upstream: u})
	defer fw.Transport().CloseIdleConnections()
	base, _ := ingress(t, fw, "h1")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/chat", nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Via") == "" {
		t.Errorf("handshake response %s %v", resp.Status, resp.Header)
	}
	for i, m := range []struct {
		typ websocket.MessageType
		msg string
	}{{websocket.MessageText, "hello"}, {websocket.MessageBinary, strings.Repeat("\x00\xff", 40<<10)}, {websocket.MessageText, "bye"}} {
		if err := c.Write(ctx, m.typ, []byte(m.msg)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		typ, got, err := c.Read(ctx)
		if err != nil || typ != m.typ || string(got) != m.msg {
			t.Fatalf("message %d: %v %d bytes, %v", i, typ, len(got), err)
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Errorf("close: %v", err)
	}
	if n := handshakes.Load(); n != 1 {
		t.Errorf("the upstream saw %d handshakes, want 1", n)
	}
}
