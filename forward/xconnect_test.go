package forward_test

//lint:file-ignore SA1019 the test drives x/net/http2's Transport, whose client sends extended CONNECT

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/forward"
)

// echoStream answers an extended CONNECT 200 and echoes the stream's
// bytes back as they arrive, until the request body ends.
func echoStream(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	buf := make([]byte, 1024)
	for {
		k, err := r.Body.Read(buf)
		if k > 0 {
			w.Write(buf[:k])
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// echoConnect starts an h2c upstream that accepts extended CONNECT
// (under GODEBUG=http2xconnect=1), reports each CONNECT's :protocol and
// header, answers 200 and echoes the stream's bytes.
func echoConnect(t *testing.T, got chan<- http.Header, n *atomic.Int64) *url.URL {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h := r.Header.Clone()
		h.Set("X-Method", r.Method)
		got <- h
		if r.Method != http.MethodConnect || r.Header.Get(":protocol") == "" {
			http.Error(w, "not an extended CONNECT", http.StatusBadRequest)
			return
		}
		echoStream(w, r)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u
}

// TestForwardExtendedConnectPassThrough: an HTTP/2 or HTTP/3 extended CONNECT
// goes on to an HTTP/2 upstream as an extended CONNECT, with its
// :protocol and without HTTP/1.1's handshake fields; the upstream gets
// one CONNECT, the client 200, and bytes flow both ways. Net/http's
// HTTP/2 server accepts extended CONNECT only under
// GODEBUG=http2xconnect=1, read at start, so the test runs itself again
// with it.
func TestForwardExtendedConnectPassThrough(t *testing.T) {
	if !strings.Contains(os.Getenv("GODEBUG"), "http2xconnect=1") {
		cmd := exec.Command(os.Args[0], "-test.run=^TestForwardExtendedConnectPassThrough$", "-test.v")
		cmd.Env = append(os.Environ(), "GODEBUG=http2xconnect=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestForwardExtendedConnectPassThrough") {
			t.Fatalf("with GODEBUG=http2xconnect=1: %v\n%s", err, out)
		}
		return
	}
	t.Run("h1-upgrade-to-h2", testUpgradeToExtendedConnect)
	t.Run("h2-to-h3", testExtendedConnectToH3)
	t.Run("websocket-over-an-h2-hop", testWebSocketOverH2Hop)
	for _, ingressProto := range []string{"h2", "h3"} {
		t.Run(ingressProto+"-to-h2", func(t *testing.T) {
			got := make(chan http.Header, 4)
			var connects atomic.Int64
			u := echoConnect(t, got, &connects)
			fw := forward.New(forward.Options{Upstream: u, Egress: forward.EgressHTTP2})
			defer fw.Transport().CloseIdleConnections()

			var base string
			var client *http.Client
			if ingressProto == "h3" {
				base, client = h3Ingress(t, fw)
			} else {
				base, _ = ingress(t, fw, "h2")
				client = h2cExtendedClient(t)
			}
			pr, pw := io.Pipe()
			defer pw.Close()
			req, _ := http.NewRequest(http.MethodConnect, base+"/chat", pr)
			if ingressProto == "h3" {
				req.Proto = "websocket" // quic-go's client takes :protocol from Proto
			} else {
				req.Header.Set(":protocol", "websocket")
			}
			req.Header.Set("Sec-WebSocket-Version", "13")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("client got %s %s", resp.Proto, resp.Status)
			}
			h := <-got
			if h.Get("X-Method") != http.MethodConnect || h.Get(":protocol") != "websocket" || h.Get("Upgrade") != "" ||
				h.Get("Sec-Websocket-Key") != "" || h.Get("Sec-Websocket-Version") != "13" {
				t.Errorf("upstream header %v", h)
			}
			wantEcho(t, pw, resp.Body)
			if n := connects.Load(); n != 1 {
				t.Errorf("the upstream received %d CONNECTs, want 1", n)
			}
		})
	}
}

// testUpgradeToExtendedConnect: an HTTP/1.1 WebSocket handshake goes to
// an HTTP/2 upstream as an extended CONNECT without Sec-WebSocket-Key
// (RFC 8441 §5); the client gets 101 with the Accept of its own key, and
// bytes flow both ways over the one CONNECT.
func testUpgradeToExtendedConnect(t *testing.T) {
	got := make(chan http.Header, 4)
	var connects atomic.Int64
	u := echoConnect(t, got, &connects)
	fw := forward.New(forward.Options{Upstream: u, Egress: forward.EgressHTTP2})
	defer fw.Transport().CloseIdleConnections()
	base, _ := ingress(t, fw, "h1")
	addr := strings.TrimPrefix(base, "http://")
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	io.WriteString(conn, "GET /chat HTTP/1.1\r\nHost: "+addr+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Key: "+key+"\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-Websocket-Accept") != wsAccept(key) ||
		!strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
		t.Fatalf("client got %s %v", resp.Status, resp.Header)
	}
	h := <-got
	if h.Get("X-Method") != http.MethodConnect || h.Get(":protocol") != "websocket" || h.Get("Sec-Websocket-Key") != "" ||
		h.Get("Upgrade") != "" || h.Get("Sec-Websocket-Version") != "13" {
		t.Errorf("upstream header %v", h)
	}
	wantEcho(t, conn, br)
	if n := connects.Load(); n != 1 {
		t.Errorf("the upstream received %d CONNECTs, want 1", n)
	}
}

// testExtendedConnectToH3: an HTTP/2 extended CONNECT goes on to an
// HTTP/3 upstream as an RFC 9220 extended CONNECT (quic-go's server hands
// its :protocol over in Request.Proto), and bytes flow both ways.
func testExtendedConnectToH3(t *testing.T) {
	var connects atomic.Int64
	protocols := make(chan string, 4)
	upBase, upClient := h3Ingress(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		connects.Add(1)
		protocols <- r.Method + " " + r.Proto
		echoStream(w, r)
	}))
	u, _ := url.Parse(upBase)
	roots := upClient.Transport.(*http3.Transport).TLSClientConfig.RootCAs
	fw := forward.New(forward.Options{Upstream: u, Egress: forward.EgressHTTP3,
		TransportOptions: replaysafe.Options{TLSClientConfig: &tls.Config{RootCAs: roots}}})
	defer fw.Transport().CloseIdleConnections()
	base, _ := ingress(t, fw, "h2")
	client := h2cExtendedClient(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodConnect, base+"/chat", pr)
	req.Header.Set(":protocol", "websocket")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("client got %s %s", resp.Proto, resp.Status)
	}
	if got := <-protocols; got != "CONNECT websocket" {
		t.Errorf("upstream got %q, want an extended CONNECT for websocket", got)
	}
	wantEcho(t, pw, resp.Body)
	if n := connects.Load(); n != 1 {
		t.Errorf("the upstream received %d CONNECTs, want 1", n)
	}
}

// testWebSocketOverH2Hop: a real WebSocket client and server
// (github.com/coder/websocket, HTTP/1.1 on both ends) talk through two
// forwarders joined by HTTP/2: the first sends the handshake on as an
// extended CONNECT (RFC 8441 §5), the second turns it back into an
// HTTP/1.1 Upgrade. Messages are echoed whole over the h2 stream, and
// the upstream sees one handshake.
func testWebSocketOverH2Hop(t *testing.T) {
	var handshakes atomic.Int64
	upURL := wsEchoServer(t, &handshakes)
	hop := make(chan string, 2)
	second := forward.New(forward.Options{Upstream: upURL, Egress: forward.EgressHTTP1, OnRequest: func(r *http.Request) error {
		hop <- fmt.Sprintf("%s HTTP/%d %s", r.Method, r.ProtoMajor, r.Header.Get(":protocol"))
		return nil
	}})
	defer second.Transport().CloseIdleConnections()
	secondBase, _ := ingress(t, second, "h2")
	secondURL, _ := url.Parse(secondBase)
	first := forward.New(forward.Options{Upstream: secondURL, Egress: forward.EgressHTTP2})
	defer first.Transport().CloseIdleConnections()
	firstBase, _ := ingress(t, first, "h1")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(firstBase, "http")+"/chat", nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer c.CloseNow()
	if via := resp.Header.Values("Via"); len(via) == 0 {
		t.Errorf("handshake response %s %v", resp.Status, resp.Header)
	}
	for i, msg := range []string{"hello", strings.Repeat("x", 10000), "bye"} {
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		_, got, err := c.Read(ctx)
		if err != nil || string(got) != msg {
			t.Fatalf("message %d: %d bytes, %v", i, len(got), err)
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Errorf("close: %v", err)
	}
	if n := handshakes.Load(); n != 1 {
		t.Errorf("the upstream saw %d handshakes, want 1", n)
	}
	if got := <-hop; got != "CONNECT HTTP/2 websocket" {
		t.Errorf("the middle hop carried %q, want an HTTP/2 extended CONNECT", got)
	}
}
