package interop

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/replaysafe/replaysafe/internal/selfsigned"
)

// ErrMissing is wrapped by the error of a server whose binary is not
// installed.
var ErrMissing = errors.New("not installed")

// Binary returns the path of a server's executable (nginx, haproxy,
// caddy): the one on PATH, else the one in /usr/sbin or /usr/bin (Debian
// puts nginx and haproxy in /usr/sbin, which an unprivileged PATH may
// lack). The error wraps ErrMissing.
func Binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("interop: %s: %w", name, ErrMissing)
}

// Version returns the first line a server prints about its version.
func Version(name string) (string, error) {
	bin, err := Binary(name)
	if err != nil {
		return "", err
	}
	var args []string
	switch name {
	case "nginx":
		args = []string{"-v"}
	case "haproxy":
		args = []string{"-v"}
	default:
		args = []string{"version"}
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("interop: %s %s: %w", bin, strings.Join(args, " "), err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
}

// Certs are a self-signed certificate for 127.0.0.1 written as PEM files
// for the servers, and the client configuration that trusts it alone.
type Certs struct {
	// CertFile and KeyFile hold the certificate and its key; BothFile
	// holds both (haproxy's "crt").
	CertFile, KeyFile, BothFile string
	// Roots trusts the certificate only.
	Roots *x509.CertPool
}

// NewCerts writes a fresh certificate into dir.
func NewCerts(dir string) (*Certs, error) {
	cert, leaf, err := selfsigned.New("replaysafe-interop")
	if err != nil {
		return nil, fmt.Errorf("interop: certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("interop: certificate key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	c := &Certs{
		CertFile: filepath.Join(dir, "cert.pem"),
		KeyFile:  filepath.Join(dir, "key.pem"),
		BothFile: filepath.Join(dir, "both.pem"),
		Roots:    x509.NewCertPool(),
	}
	c.Roots.AddCert(leaf)
	for _, f := range []struct {
		path string
		data []byte
	}{{c.CertFile, certPEM}, {c.KeyFile, keyPEM}, {c.BothFile, append(append([]byte{}, certPEM...), keyPEM...)}} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, fmt.Errorf("interop: writing %s: %w", f.path, err)
		}
	}
	return c, nil
}

// TLS returns a client configuration trusting the certificate alone.
func (c *Certs) TLS() *tls.Config {
	return &tls.Config{RootCAs: c.Roots, ServerName: "127.0.0.1"}
}

// FreePort returns a loopback port free for TCP and, when udp is set,
// for UDP too (caddy serves HTTP/3 on the HTTPS port number). Another
// process may take it before the server binds it: a start that fails is
// retried on a new port by the callers.
func FreePort(udp bool) (int, error) {
	for i := 0; i < 20; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("interop: free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !udp {
			l.Close()
			return port, nil
		}
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, errors.New("interop: no loopback port free for both TCP and UDP")
}

// Process is a server started by the tests: its command, its directory
// and its output.
type Process struct {
	// Name is the server's name (nginx, haproxy, caddy).
	Name string
	// Dir is the directory holding its configuration and logs.
	Dir  string
	cmd  *exec.Cmd
	out  *os.File
	done chan struct{}
	err  error
	once sync.Once
	stop syscall.Signal
}

// start runs bin with args in dir, its output in dir/name.out, and waits
// until every addr accepts TCP connections.
func start(name, dir, bin string, args []string, env []string, stop syscall.Signal, addrs ...string) (*Process, error) {
	out, err := os.OpenFile(filepath.Join(dir, name+".out"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("interop: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	// The server dies with the test process even when that one panics.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("interop: starting %s: %w", name, err)
	}
	p := &Process{Name: name, Dir: dir, cmd: cmd, out: out, done: make(chan struct{}), stop: stop}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for _, addr := range addrs {
		for {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-p.done:
				out.Close()
				return nil, fmt.Errorf("interop: %s exited at start (%v): %s", name, p.err, p.Output())
			default:
			}
			if time.Now().After(deadline) {
				p.Stop()
				return nil, fmt.Errorf("interop: %s does not listen on %s after 15s: %s", name, addr, p.Output())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return p, nil
}

// Output returns the end of what the server printed.
func (p *Process) Output() string {
	b, _ := os.ReadFile(filepath.Join(p.Dir, p.Name+".out"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Stop stops the server with its shutdown signal and, after 5 s, kills
// it; it waits for the exit.
func (p *Process) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(p.stop)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		p.out.Close()
	})
}

// Kill kills the server at once (SIGKILL): it closes nothing on the wire,
// as a crash would.
func (p *Process) Kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		p.out.Close()
	})
}

// waitCtx sleeps d unless ctx ends first.
func waitCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
