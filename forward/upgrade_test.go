package forward_test

//lint:file-ignore SA1019 the test drives x/net/http2's Transport, whose client sends extended CONNECT

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/forward"
)

// wsAccept is Sec-WebSocket-Accept for key (RFC 6455 §4.2.2).
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// echoUpgrade is an upstream that accepts a WebSocket-style Upgrade and
// then echoes every byte; it reports the handshake's header.
func echoUpgrade(t *testing.T, got chan<- http.Header) *url.URL {
	return echoUpgradeConns(t, got, nil)
}

// echoUpgradeConns is echoUpgrade that also hands each upgraded
// connection to conns (when not nil), for a test to close.
func echoUpgradeConns(t *testing.T, got chan<- http.Header, conns chan<- net.Conn) *url.URL {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "not an upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		if conns != nil {
			conns <- conn
		}
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade, X-Up-Hop\r\nX-Up-Hop: 1\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			wsAccept(r.Header.Get("Sec-Websocket-Key")))
		brw.Flush()
		io.Copy(conn, brw)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u
}

// wantEcho writes two messages to w and reads each back whole from r.
func wantEcho(t *testing.T, w io.Writer, r io.Reader) {
	t.Helper()
	for _, msg := range []string{"ping", "second message"} {
		if _, err := io.WriteString(w, msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(r, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo %q, %v", buf, err)
		}
	}
}

// h2cExtendedClient is an HTTP/2 client over cleartext that sends
// extended CONNECT: a replaysafe Transport speaking h2c, on its own
// connection (transports/h2). net/http's client refuses the ":protocol"
// field, and so does x/net's on Go 1.27, where it wraps net/http's.
func h2cExtendedClient(t *testing.T) *http.Client {
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2, IgnoreProxyEnvironment: true})
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// TestForwardUpgradeTunnel: an HTTP/1.1 Upgrade handshake goes through with only
// its connection fields, the 101 comes back, and bytes flow both ways.
func TestForwardUpgradeTunnel(t *testing.T) {
	got := make(chan http.Header, 1)
	u := echoUpgrade(t, got)
	fw := forward.New(forward.Options{Upstream: u})
	defer fw.Transport().CloseIdleConnections()
	front := httptest.NewServer(fw)
	defer front.Close()

	c, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	fmt.Fprintf(c, "GET /chat HTTP/1.1\r\nHost: front\r\nConnection: keep-alive, Upgrade, X-Hop\r\nX-Hop: 1\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "websocket" || resp.Header.Get("Connection") != "Upgrade" ||
		resp.Header.Get("Sec-Websocket-Accept") != wsAccept(key) || resp.Header.Get("X-Up-Hop") != "" {
		t.Fatalf("client got %s %v", resp.Status, resp.Header)
	}
	h := <-got
	if h.Get("Connection") != "Upgrade" || h.Get("Upgrade") != "websocket" || h.Get("X-Hop") != "" ||
		h.Get("Sec-Websocket-Key") != key || h.Get("Via") != "1.1 replaysafe" {
		t.Errorf("upstream handshake header %v", h)
	}
	wantEcho(t, c, br)
}

// TestForwardExtendedConnectToUpgrade: an HTTP/2 extended CONNECT for websocket
// (RFC 8441) goes upstream as an HTTP/1.1 Upgrade handshake with a fresh
// key, the client gets 200, and bytes flow both ways. net/http's server
// accepts extended CONNECT only under GODEBUG=http2xconnect=1, read when
// the process starts, so the test runs itself again with it.
func TestForwardExtendedConnectToUpgrade(t *testing.T) {
	if !strings.Contains(os.Getenv("GODEBUG"), "http2xconnect=1") {
		cmd := exec.Command(os.Args[0], "-test.run=^TestForwardExtendedConnectToUpgrade$", "-test.v")
		cmd.Env = append(os.Environ(), "GODEBUG=http2xconnect=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestForwardExtendedConnectToUpgrade") {
			t.Fatalf("with GODEBUG=http2xconnect=1: %v\n%s", err, out)
		}
		return
	}
	got := make(chan http.Header, 1)
	u := echoUpgrade(t, got)
	fw := forward.New(forward.Options{Upstream: u})
	defer fw.Transport().CloseIdleConnections()
	base, _ := ingress(t, fw, "h2")
	client := h2cExtendedClient(t)

	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodConnect, base+"/chat", pr)
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || resp.Header.Get("Sec-Websocket-Accept") != "" || resp.Header.Get("Upgrade") != "" {
		t.Fatalf("client got %s %s %v", resp.Proto, resp.Status, resp.Header)
	}
	h := <-got
	if h.Get("Connection") != "Upgrade" || h.Get("Upgrade") != "websocket" || len(h.Get("Sec-Websocket-Key")) != 24 ||
		h.Get("Sec-Websocket-Version") != "13" || h.Get("Via") != "2 replaysafe" || h.Get(":protocol") != "" {
		t.Errorf("upstream handshake header %v", h)
	}
	wantEcho(t, pw, resp.Body)
}

// TestForwardExtendedConnectH3ToUpgrade: the same over HTTP/3 (RFC 9220), with
// quic-go's server (which enables extended CONNECT) and client (which
// sends :protocol from Request.Proto).
func TestForwardExtendedConnectH3ToUpgrade(t *testing.T) {
	got := make(chan http.Header, 1)
	u := echoUpgrade(t, got)
	fw := forward.New(forward.Options{Upstream: u})
	defer fw.Transport().CloseIdleConnections()
	base, client := h3Ingress(t, fw)

	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest(http.MethodConnect, base+"/chat", pr)
	req.Proto = "websocket"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 3 || resp.Header.Get("Sec-Websocket-Accept") != "" {
		t.Fatalf("client got %s %s %v", resp.Proto, resp.Status, resp.Header)
	}
	h := <-got
	if h.Get("Connection") != "Upgrade" || h.Get("Upgrade") != "websocket" || len(h.Get("Sec-Websocket-Key")) != 24 ||
		h.Get("Via") != "3 replaysafe" {
		t.Errorf("upstream handshake header %v", h)
	}
	wantEcho(t, pw, resp.Body)
}

// TestForwardExtendedConnectEndsWithItsStream: a tunnel whose client
// finished sending (FIN on its stream) and then went away ends, although
// the upstream, which never learns of the FIN, keeps its side open: the
// forwarder's handler returns once the inbound stream is canceled,
// instead of waiting on the upstream for ever.
func TestForwardExtendedConnectEndsWithItsStream(t *testing.T) {
	// The upstream hands its connection to the test, which closes it
	// should the forwarder hang on it: the test then fails instead of
	// hanging.
	got := make(chan http.Header, 1)
	upConns := make(chan net.Conn, 1)
	u := echoUpgradeConns(t, got, upConns)
	fw := forward.New(forward.Options{Upstream: u})
	defer fw.Transport().CloseIdleConnections()
	handled := make(chan struct{})
	base, client := h3Ingress(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handled)
		fw.ServeHTTP(w, r)
	}))

	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodConnect, base+"/chat", pr)
	req.Proto = "websocket"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("client got %s", resp.Status)
	}
	upConn := <-upConns
	// The last message and the stream's end go out together; its echo
	// coming back means the forwarder read the end behind it.
	if _, err := io.WriteString(pw, "last"); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "last" {
		t.Fatalf("echo %q, %v", buf, err)
	}
	resp.Body.Close() // the client goes away; the upstream still waits
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		upConn.Close()
		t.Fatal("the forwarder's tunnel outlived its inbound stream by 10 s")
	}
}

// TestForwardUpgradeHandshakeResent: a close crossing the (bodyless, idempotent)
// WebSocket handshake on a pooled connection is resent once on a new
// connection with its Upgrade metadata intact, and the tunnel then works.
// The upstream is a raw listener: connection 0 answers the warm-up and
// closes on the handshake; connection 1 accepts the upgrade and echoes.
func TestForwardUpgradeHandshakeResent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	handshakes := make(chan http.Header, 2)
	go func() {
		for i := 0; i < 2; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(i int, c net.Conn) {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				if i == 0 {
					if _, err := http.ReadRequest(br); err != nil { // the warm-up
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				handshakes <- req.Header
				if i == 0 {
					return // the close crosses the handshake
				}
				fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: %s\r\n\r\n",
					wsAccept(req.Header.Get("Sec-Websocket-Key")))
				io.Copy(c, br)
			}(i, c)
		}
	}()
	u, _ := url.Parse("http://" + ln.Addr().String())
	fw := forward.New(forward.Options{Upstream: u})
	defer fw.Transport().CloseIdleConnections()
	front := httptest.NewServer(fw)
	defer front.Close()

	resp, err := http.Get(front.URL + "/warm")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	c, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	fmt.Fprintf(c, "GET /chat HTTP/1.1\r\nHost: front\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key)
	br := bufio.NewReader(c)
	r101, err := http.ReadResponse(br, nil)
	if err != nil || r101.StatusCode != 101 || r101.Header.Get("Sec-Websocket-Accept") != wsAccept(key) {
		t.Fatalf("client got %v, %v", r101, err)
	}
	first, second := <-handshakes, <-handshakes
	for i, h := range []http.Header{first, second} {
		if h.Get("Connection") != "Upgrade" || h.Get("Upgrade") != "websocket" || h.Get("Sec-Websocket-Key") != key {
			t.Errorf("handshake copy %d: %v", i, h)
		}
	}
	io.WriteString(c, "after the resend")
	buf := make([]byte, len("after the resend"))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "after the resend" {
		t.Fatalf("echo %q, %v", buf, err)
	}
}
