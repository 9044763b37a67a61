package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/internal/selfsigned"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

// testCommandEnv, set in the environment of the test binary, makes it
// run the command it names (its arguments one a line) instead of the
// tests: a test that signals the command runs it as a process of its own.
const testCommandEnv = "REPLAYSAFE_TEST_COMMAND"

func TestMain(m *testing.M) {
	if args := os.Getenv(testCommandEnv); args != "" {
		os.Exit(run(strings.Split(args, "\n"), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

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

// headerUpstream is an upstream on loopback that records the Host and
// header of each request it receives.
func headerUpstream(t *testing.T) (*httptest.Server, <-chan *http.Request) {
	t.Helper()
	got := make(chan *http.Request, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Clone(context.Background())
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	return up, got
}

// TestForwardHeaderFlags: the forwarding header flags reach the upstream
// as asked, X-Forwarded-For by default as httputil.ReverseProxy does,
// and the first log line names the listener, what it accepts and the
// egress.
func TestForwardHeaderFlags(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		xff       string // X-Forwarded-For at the upstream
		forwarded string // Forwarded at the upstream, with ADDR for the forwarder's address
		proxyHost bool   // the upstream sees the forwarder's address as Host
		logs      string
	}{
		{"default", nil, "127.0.0.1", "", false, "adds X-Forwarded-For, Via; the upstream's Host; inbound forwarding fields removed"},
		{"no-xff-forwarded", []string{"-x-forwarded-for=false", "-forwarded"}, "", "for=127.0.0.1;host=\"ADDR\";proto=http", false, "adds Forwarded, Via"},
		{"trust", []string{"-trust-forwarded"}, "192.0.2.1, 127.0.0.1", "", false, "inbound forwarding fields kept"},
		{"preserve-host", []string{"-preserve-host", "-h2c"}, "127.0.0.1", "", true, "(HTTP/1.1, h2c), forwarding to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, got := headerUpstream(t)
			addr, logs := startForward(t, append([]string{"-to", up.URL}, tc.args...)...)
			req, err := http.NewRequest("GET", "http://"+addr+"/h", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Forwarded-For", "192.0.2.1") // a client's claim
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%v\n%s", err, logs)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d\n%s", resp.StatusCode, logs)
			}
			r := <-got
			if g := strings.Join(r.Header.Values("X-Forwarded-For"), ", "); g != tc.xff {
				t.Errorf("X-Forwarded-For %q, want %q", g, tc.xff)
			}
			if tc.xff != "" && (r.Header.Get("X-Forwarded-Proto") != "http" || r.Header.Get("X-Forwarded-Host") != addr) {
				t.Errorf("X-Forwarded-Proto %q, X-Forwarded-Host %q", r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"))
			}
			if want := strings.ReplaceAll(tc.forwarded, "ADDR", addr); r.Header.Get("Forwarded") != want {
				t.Errorf("Forwarded %q, want %q", r.Header.Get("Forwarded"), want)
			}
			if wantHost := strings.TrimPrefix(up.URL, "http://"); tc.proxyHost && r.Host != addr || !tc.proxyHost && r.Host != wantHost {
				t.Errorf("Host %q (forwarder %s, upstream %s), preserve %v", r.Host, addr, wantHost, tc.proxyHost)
			}
			first, _, _ := strings.Cut(logs.String(), "\n")
			if !strings.HasPrefix(first, "replaysafe forward: listening on http://"+addr+" (HTTP/1.1") ||
				!strings.Contains(first, "forwarding to "+up.URL+" (egress h1; ") || !strings.Contains(first, tc.logs) {
				t.Errorf("first log line %q lacks the listener, the egress or %q", first, tc.logs)
			}
		})
	}
}

// TestForwardDrainsOnSIGTERM runs `replaysafe forward` as a process of
// its own and sends it SIGTERM while a slow request is in flight: it
// logs the request it waits for, the request completes, and the command
// logs that it did and exits 0.
func TestForwardDrainsOnSIGTERM(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "slow and whole")
	}))
	defer up.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), testCommandEnv+"="+strings.Join([]string{"forward", "-listen", "127.0.0.1:0", "-to", up.URL, "-shutdown-timeout", "1m"}, "\n"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var log []string
	// waitFor returns the first line from now on that contains s.
	waitFor := func(s string) string {
		t.Helper()
		for l := range lines {
			log = append(log, l)
			if strings.Contains(l, s) {
				return l
			}
		}
		t.Fatalf("the command ended without logging %q:\n%s", s, strings.Join(log, "\n"))
		return ""
	}
	m := regexp.MustCompile(`listening on http://(\S+) `).FindStringSubmatch(waitFor("listening on"))
	if m == nil {
		t.Fatalf("no address in %q", log)
	}

	type result struct {
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + m[1] + "/slow")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{string(b), err}
	}()
	<-arrived
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor("shutting down: 1 request(s) in flight, waiting up to 1m0s")
	close(release)
	if r := <-done; r.err != nil || r.body != "slow and whole" {
		t.Errorf("the request in flight got %q, %v", r.body, r.err)
	}
	waitFor("every request in flight finished")
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the command exited with %v, want 0:\n%s", err, strings.Join(log, "\n"))
	}
}

// TestForwardShutdownTimeout: a request still in flight when
// -shutdown-timeout passes is cut, logged, and the command exits 1.
func TestForwardShutdownTimeout(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
	}))
	defer up.Close()
	defer close(release)
	ctx, stop := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	addrc, code := make(chan string, 1), make(chan int, 1)
	go func() {
		code <- serveForward(ctx, []string{"-listen", "127.0.0.1:0", "-to", up.URL, "-shutdown-timeout", "1ms"}, logs, func(a string) { addrc <- a })
	}()
	addr := <-addrc
	go func() {
		if resp, err := http.Get("http://" + addr + "/stuck"); err == nil {
			resp.Body.Close()
		}
	}()
	<-arrived
	stop()
	if c := <-code; c != 1 {
		t.Errorf("exit %d, want 1", c)
	}
	for _, want := range []string{"shutting down: 1 request(s) in flight, waiting up to 1ms", "context deadline exceeded; 1 request(s) cut"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}
