package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/internal/selfsigned"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

// syncBuffer is a bytes.Buffer safe for the server's log and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startForward runs `replaysafe forward` with args on a loopback port
// and returns its address and its stderr.
func startForward(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	addrc := make(chan string, 1)
	done := make(chan int, 1)
	go func() {
		done <- serveForward(ctx, append([]string{"-listen", "127.0.0.1:0"}, args...), logs, func(a string) { addrc <- a })
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("replaysafe forward exited %d:\n%s", code, logs)
		}
	})
	select {
	case a := <-addrc:
		return a, logs
	case code := <-done:
		done <- code
		t.Fatalf("replaysafe forward exited %d:\n%s", code, logs)
	case <-time.After(10 * time.Second):
		t.Fatal("replaysafe forward did not start")
	}
	return "", nil
}

func TestForwardFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-to", "ftp://x"},
		{"-to", "http://x", "-egress", "h9"},
		{"-to", "http://x", "-egress", "h3"},
		{"-to", "http://x", "-tls-cert", "c.pem"},
		{"-to", "http://x", "-h3"},
	} {
		var errOut bytes.Buffer
		if code := serveForward(context.Background(), args, &errOut, nil); code != 2 {
			t.Errorf("forward %q exited %d, want 2", args, code)
		}
		if !strings.Contains(errOut.String(), "replaysafe forward:") {
			t.Errorf("forward %q said %q", args, errOut.String())
		}
	}
}

// tlsFiles writes a self-signed loopback certificate and its key.
func tlsFiles(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	pair, _, err := selfsigned.New("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(pair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pair.Certificate[0]}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	return certFile, keyFile
}

// TestForwardWithCurl drives `replaysafe forward` with curl as the real
// client over HTTP/1.0, HTTP/1.1, HTTP/2 (TLS, ALPN) and HTTP/2 with prior
// knowledge (h2c), and checks what the counting upstream received.
func TestForwardWithCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is required when CI=true (.ci/setup installs it)")
		}
		t.Skip("curl not found; install it to run the curl rows")
	}
	certFile, keyFile := tlsFiles(t)
	for _, tc := range []struct {
		flag    string
		args    []string // extra replaysafe forward flags
		scheme  string
		version string // curl's %{http_version}: "1" is HTTP/1.0
		via     string
		hop     string // X-Hop at the upstream: named by Connection over HTTP/1, which HTTP/2 has not (curl drops it)
	}{
		{"--http1.0", nil, "http", "1", "1.0 replaysafe", ""},
		{"--http1.1", nil, "http", "1.1", "1.1 replaysafe", ""},
		{"--http2", []string{"-tls-cert", certFile, "-tls-key", keyFile}, "https", "2", "2 replaysafe", "1"},
		{"--http2-prior-knowledge", []string{"-h2c"}, "http", "2", "2 replaysafe", "1"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			up, err := replaysafetest.Start(replaysafetest.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			addr, logs := startForward(t, append([]string{"-to", up.URL() + "/base"}, tc.args...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, curl, "-sS", "-k", tc.flag,
				"-H", "Connection: X-Hop", "-H", "X-Hop: 1", "--data-binary", "payload",
				"-w", " %{http_code} %{http_version}", tc.scheme+"://"+addr+"/c?x=1").CombinedOutput()
			if err != nil {
				t.Fatalf("curl: %v\n%s", err, out)
			}
			if want := "ok 200 " + tc.version; string(out) != want && !(tc.version == "1" && string(out) == want+".0") {
				t.Errorf("curl printed %q, want %q", out, want)
			}
			rs := up.Requests()
			if len(rs) != 1 {
				t.Fatalf("upstream received %d requests, want 1", len(rs))
			}
			r := rs[0]
			if r.Method != "POST" || r.Target != "/base/c?x=1" || string(r.Body) != "payload" || r.Proto != "HTTP/1.1" {
				t.Errorf("upstream received %s %s %s body %q", r.Method, r.Target, r.Proto, r.Body)
			}
			if r.Header.Get("Via") != tc.via || r.Header.Get("X-Hop") != tc.hop {
				t.Errorf("upstream received Via %q X-Hop %q", r.Header.Get("Via"), r.Header.Get("X-Hop"))
			}
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(logs.String(), "status=200") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			for _, want := range []string{"method=POST", `target="/c?x=1"`, "upstream=HTTP/1.1", "attempts=1", "status=200"} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("access log lacks %s:\n%s", want, logs)
				}
			}
		})
	}
}

// TestForwardHTTP3: with -h3 the command also serves HTTP/3 on the same
// port over UDP; quic-go's client is the real client here.
func TestForwardHTTP3(t *testing.T) {
	certFile, keyFile := tlsFiles(t)
	up, err := replaysafetest.Start(replaysafetest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	addr, logs := startForward(t, "-to", up.URL(), "-tls-cert", certFile, "-tls-key", keyFile, "-h3")
	tr := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.Close()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Post("https://"+addr+"/h3", "text/plain", strings.NewReader("over quic"))
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 3 || resp.StatusCode != 200 || string(body) != "ok" {
		t.Errorf("client got %s %s %q", resp.Proto, resp.Status, body)
	}
	rs := up.Requests()
	if len(rs) != 1 || rs[0].Target != "/h3" || string(rs[0].Body) != "over quic" || rs[0].Header.Get("Via") != "3 replaysafe" {
		t.Errorf("upstream received %+v", rs)
	}
}
