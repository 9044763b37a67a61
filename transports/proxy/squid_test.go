//go:build linux

package proxy

// Interop with a real HTTP proxy: Debian's squid (5.7 on Debian 12),
// started by the test itself on loopback ports of its own, with a
// configuration written into the test's temporary directory. CI installs
// squid with .ci/setup; elsewhere the test skips when squid is missing.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/fsm/route"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

const (
	// squidStartWait bounds the wait for squid's ports to accept
	// connections.
	squidStartWait = 15 * time.Second
	// squidPoll is the pause between two probes, at start and at stop.
	squidPoll = 25 * time.Millisecond
	// squidStopWait is how long squid may take to exit after SIGTERM
	// before it is killed. With shutdown_lifetime 0 it takes about 2 s.
	squidStopWait = 10 * time.Second
	// squidHelperWait bounds the wait for squid's helpers to exit once
	// squid has: they exit when their stdin reaches end of file.
	squidHelperWait = time.Second
	// squidAttempts bounds the launches: a port picked free can be taken
	// by someone else before squid binds it.
	squidAttempts = 3
	// squidBudget is the acquisition budget of the dials through squid.
	squidBudget = 10 * time.Second
	// squidIO bounds each exchange through a tunnel.
	squidIO = 5 * time.Second

	squidRealm    = "replaysafe-squid"
	squidUser     = "alice"
	squidPassword = "wonderland"
)

// squidAuthHelper is squid's Basic authentication helper, run by /bin/sh
// (so a noexec temporary directory does not matter). Squid writes one
// "user password" line per check (URL-escaped; these credentials need no
// escaping) and reads OK or ERR.
const squidAuthHelper = `# Written by squid_test.go.
while read -r user pass; do
	if [ "$user" = '` + squidUser + `' ] && [ "$pass" = '` + squidPassword + `' ]; then
		echo OK
	else
		echo ERR
	fi
done
`

// squidConf is the whole configuration. None of the stock squid.conf
// rules apply (its "deny CONNECT !SSL_ports" would refuse every port but
// 443): access is allowed from 127.0.0.1 to 127.0.0.1 only, minus one
// denied port, with Basic authentication required on the second port.
// The verbs fill in, in order: the open port, the authenticating port,
// the effective-user line, the helper's path, the denied port, and the
// directory for the pid file, the logs and core dumps (four times).
const squidConf = `# Written by squid_test.go: a loopback forward proxy for one test.
http_port 127.0.0.1:%d name=open
http_port 127.0.0.1:%d name=auth
visible_hostname replaysafe-squid-test
%s

auth_param basic program /bin/sh %s
auth_param basic children 1 startup=0 idle=1
auth_param basic realm ` + squidRealm + `

acl rs_from src 127.0.0.1/32
acl rs_to dst 127.0.0.1/32
acl rs_denied_port port %d
acl rs_auth_port myportname auth
acl rs_authed proxy_auth REQUIRED
http_access deny rs_denied_port
http_access deny rs_auth_port !rs_authed
http_access allow rs_from rs_to
http_access deny all

cache deny all
cache_mem 0 MB
cache_store_log none
netdb_filename none
pinger_enable off
icp_port 0
htcp_port 0
logfile_rotate 0
shutdown_lifetime 0 seconds
pid_filename %s/squid.pid
access_log stdio:%s/access.log
cache_log %s/cache.log
coredump_dir %s
`

// squidSeq makes service names unique within the process.
var squidSeq atomic.Int32

// squidServer is a running squid.
type squidServer struct {
	open, auth route.Hop // the two ports, as proxy hops
	dir        string    // holds the configuration, the helper and the logs
	svc        string    // the service name (-n), which names squid's shared memory segments
	cmd        *exec.Cmd
	cancel     context.CancelFunc
	exited     chan struct{} // closed when Wait has returned
	waitErr    error         // Wait's result, once exited is closed
	stopped    bool
	// wantLog lists the access.log entries the subtests caused, as
	// "code/status method URL user".
	wantLog []string
}

// squidBinary finds squid or skips the test; in CI, where .ci/setup
// installs it, a missing squid is a failure.
func squidBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("squid"); err == nil {
		return p
	}
	// /usr/sbin is not on every user's PATH.
	if fi, err := os.Stat("/usr/sbin/squid"); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return "/usr/sbin/squid"
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("squid is required in CI: .ci/setup installs it (apt-get install squid)")
	}
	t.Skip("squid is not installed; to run this interop test, install it with: sudo apt-get install squid (the test starts a squid of its own; the system service need not run)")
	return ""
}

// squidDir returns the directory for squid's files and the configuration
// line naming the user squid runs as. Squid refuses to run as root: when
// started as root it switches to cache_effective_user, so the directory
// is handed to that user ("proxy" on Debian) and the test's temporary
// parent directory, which the testing package creates with mode 0700, is
// made traversable.
func squidDir(t *testing.T) (dir, userLine string) {
	t.Helper()
	dir = t.TempDir()
	if strings.ContainsAny(dir, " \t\"'#") {
		t.Fatalf("temporary directory %q has a character squid.conf cannot carry unquoted: set TMPDIR", dir)
	}
	if os.Geteuid() != 0 {
		return dir, "# Not started as root: squid runs as the test's user."
	}
	var u *user.User
	var err error
	for _, name := range []string{"proxy", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("started as root, squid needs an unprivileged user (proxy or nobody): %v", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("user %s: %v", u.Username, err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	return dir, "cache_effective_user " + u.Username
}

// freePorts returns two distinct loopback ports that were free a moment
// ago.
func freePorts(t *testing.T) (int, int) {
	t.Helper()
	var ports [2]int
	var lns [2]net.Listener
	for i := range lns {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports[0], ports[1]
}

// startSquid starts squid (the binary bin), which lets 127.0.0.1 reach
// every port of 127.0.0.1 but deniedPort, and stops it at the end of the
// test.
func startSquid(t *testing.T, bin string, deniedPort int) *squidServer {
	t.Helper()
	dir, userLine := squidDir(t)
	helper := filepath.Join(dir, "basic_auth.sh")
	if err := os.WriteFile(helper, []byte(squidAuthHelper), 0o644); err != nil {
		t.Fatal(err)
	}
	vctx, vcancel := context.WithTimeout(context.Background(), squidStartWait)
	defer vcancel()
	if out, err := exec.CommandContext(vctx, bin, "-v").Output(); err == nil {
		first, _, _ := bytes.Cut(out, []byte("\n"))
		t.Logf("%s: %s", bin, first)
	}
	for attempt := 1; ; attempt++ {
		openPort, authPort := freePorts(t)
		conf := fmt.Sprintf(squidConf, openPort, authPort, userLine, helper, deniedPort, dir, dir, dir, dir)
		confPath := filepath.Join(dir, "squid.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		s := &squidServer{
			open: route.Hop{Kind: route.ProxyHTTP, Host: "127.0.0.1", Port: uint16(openPort)},
			auth: route.Hop{Kind: route.ProxyHTTP, Host: "127.0.0.1", Port: uint16(authPort)},
			dir:  dir,
			svc:  "replaysafe" + strconv.Itoa(os.Getpid()) + "n" + strconv.Itoa(int(squidSeq.Add(1))),
		}
		err := s.launch(bin, confPath)
		if err == nil {
			t.Cleanup(func() {
				if err := s.stop(); err != nil {
					t.Error(err)
				}
				if t.Failed() {
					s.logFiles(t)
				}
			})
			return s
		}
		t.Logf("squid launch %d of %d: %v", attempt, squidAttempts, err)
		if serr := s.stop(); serr != nil {
			t.Error(serr)
		}
		if attempt == squidAttempts {
			s.logFiles(t)
			t.Fatalf("squid did not start: %v", err)
		}
	}
}

// launch starts squid in the foreground (-N: no daemon, one process that
// is master and worker) and waits until both ports accept connections.
func (s *squidServer) launch(bin, confPath string) error {
	stderr, err := os.Create(filepath.Join(s.dir, "squid.stderr"))
	if err != nil {
		return err
	}
	defer stderr.Close() // the child has its own descriptor
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.cmd = exec.CommandContext(ctx, bin, "-N", "-n", s.svc, "-f", confPath)
	s.cmd.Dir = s.dir
	s.cmd.Stdout, s.cmd.Stderr = stderr, stderr // files: exec starts no copying goroutine
	// Should the test binary die without cleanup (a -timeout panic, a
	// signal), squid gets SIGTERM. The kernel clears this setting when
	// squid switches users, so it only helps when not started as root.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	s.cmd.Cancel = func() error { return s.cmd.Process.Signal(syscall.SIGTERM) }
	s.cmd.WaitDelay = squidStopWait
	s.exited = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		cancel()
		close(s.exited)
		return err
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	addrs := []string{s.open.Addr(), s.auth.Addr()}
	deadline := time.Now().Add(squidStartWait)
	for i := 0; i < int(squidStartWait/squidPoll) && time.Now().Before(deadline); i++ {
		select {
		case <-s.exited:
			return fmt.Errorf("squid exited before accepting connections (%v); stderr: %s", s.waitErr, readTail(filepath.Join(s.dir, "squid.stderr")))
		default:
		}
		ready := 0
		for _, a := range addrs {
			if c, err := net.DialTimeout("tcp4", a, squidPoll); err == nil {
				c.Close()
				ready++
			}
		}
		if ready == len(addrs) {
			return nil
		}
		time.Sleep(squidPoll)
	}
	return fmt.Errorf("squid's ports %v did not accept connections within %v", addrs, squidStartWait)
}

// stop ends squid with SIGTERM (SIGKILL after squidStopWait) and reaps
// it, then checks that none of its helpers outlived it. It removes any
// shared memory segment of squid's service name: squid removes them when
// it exits cleanly, not when it is killed. Calls after the first do
// nothing.
func (s *squidServer) stop() error {
	if s.stopped || s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	s.stopped = true
	// Squid starts each helper in a session of its own, and a helper
	// that outlives squid is adopted by init: note them while they are
	// still squid's.
	var helpers []procID
	select {
	case <-s.exited:
	default:
		helpers = descendants(s.cmd.Process.Pid)
	}
	s.cancel()
	<-s.exited
	var errs []error
	if st := s.cmd.ProcessState; errors.Is(s.waitErr, exec.ErrWaitDelay) || !st.Exited() {
		errs = append(errs, fmt.Errorf("squid did not exit within %v of SIGTERM: %v", squidStopWait, st))
	}
	// A helper started after that look still names the test's
	// directory on its command line.
	left := running(append(helpers, mentioning(s.dir)...))
	for i := 0; len(left) > 0 && i < int(squidHelperWait/squidPoll); i++ {
		time.Sleep(squidPoll)
		left = running(left)
	}
	if len(left) > 0 {
		for _, p := range left {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
		errs = append(errs, fmt.Errorf("squid's helpers %v still ran %v after it exited: killed", left, squidHelperWait))
	}
	shm, _ := filepath.Glob("/dev/shm/" + s.svc + "-*")
	for _, f := range shm {
		os.Remove(f)
	}
	return errors.Join(errs...)
}

// procID identifies a process: a pid, and its start time, so that a
// reused pid is not taken for it.
type procID struct {
	pid   int
	start string
}

// procStat reads a process's state, parent and start time from
// /proc/pid/stat.
func procStat(pid int) (state string, ppid int, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, "", false
	}
	// "pid (comm) state ppid ... starttime ...": comm may hold spaces
	// and parentheses, so the fields are counted after the last ')';
	// starttime is field 22, the 20th after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", 0, "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0], ppid, f[19], err == nil
}

// descendants returns the processes below pid.
func descendants(root int) []procID {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]procID{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, start, ok := procStat(pid); ok {
			children[ppid] = append(children[ppid], procID{pid, start})
		}
	}
	var out []procID
	queue := []int{root}
	for len(queue) > 0 && len(out) < len(ents) {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// mentioning returns the processes whose command line contains dir.
func mentioning(dir string) []procID {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procID
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		if _, _, start, ok := procStat(pid); ok {
			out = append(out, procID{pid, start})
		}
	}
	return out
}

// running returns the processes of ps, once each, that still run:
// neither gone, nor zombies, nor replaced by another process with the
// same pid.
func running(ps []procID) []procID {
	var out []procID
	for _, p := range ps {
		if slices.Contains(out, p) {
			continue
		}
		if state, _, start, ok := procStat(p.pid); ok && start == p.start && state != "Z" {
			out = append(out, p)
		}
	}
	return out
}

func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const n = 8 << 10
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}

// logFiles puts squid's logs into the test log.
func (s *squidServer) logFiles(t *testing.T) {
	t.Helper()
	for _, f := range []string{"squid.stderr", "cache.log", "access.log"} {
		t.Logf("squid %s:\n%s", f, readTail(filepath.Join(s.dir, f)))
	}
}

// expect records an access.log entry a subtest caused.
func (s *squidServer) expect(status, target, user string) {
	s.wantLog = append(s.wantLog, status+" CONNECT "+target+" "+user)
}

// checkAccessLog stops squid, which flushes access.log, and compares the
// transactions logged with those expected, ignoring the readiness probes
// (connections closed before a request).
func (s *squidServer) checkAccessLog(t *testing.T) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for line := range strings.Lines(string(b)) {
		// time elapsed client code/status bytes method URL user hierarchy type
		f := strings.Fields(line)
		if len(f) < 8 || f[5] == "-" {
			continue
		}
		got = append(got, f[3]+" "+f[5]+" "+f[6]+" "+f[7])
	}
	want := slices.Clone(s.wantLog)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("squid logged\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// squidOrigin starts a scripted origin for one subtest.
func squidOrigin(t *testing.T, useTLS bool) *replaysafetest.Server {
	t.Helper()
	o, err := replaysafetest.Start(replaysafetest.Config{TLS: useTLS, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// squidRoute is the route to origin o through hop.
func squidRoute(t *testing.T, o *replaysafetest.Server, hop route.Hop) route.Route {
	t.Helper()
	scheme := route.SchemeHTTP
	if o.TLS() {
		scheme = route.SchemeHTTPS
	}
	ap := netip.MustParseAddrPort(o.Addr())
	r, err := route.New(route.Spec{Scheme: scheme, Host: ap.Addr().String(), Port: ap.Port(), UseProxy: true, Chain: []route.Hop{hop}, Policy: route.PolicyH1})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// squidExchange sends one request with a body through c, reads the
// response and checks that the origin received exactly that request, byte
// for byte, on one connection, and no Proxy-Authorization.
func squidExchange(t *testing.T, c net.Conn, o *replaysafetest.Server, path string) {
	t.Helper()
	const body = "replayed? never"
	sent := "POST " + path + "?via=squid HTTP/1.1\r\n" +
		"Host: " + o.Addr() + "\r\n" +
		"User-Agent: replaysafe-squid-interop\r\n" +
		"Content-Type: text/plain\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"\r\n" + body
	c.SetDeadline(time.Now().Add(squidIO))
	if _, err := io.WriteString(c, sent); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(got) != "ok" {
		t.Fatalf("origin answered %s %q (%v), want 200 \"ok\"", resp.Status, got, err)
	}
	// The origin records a request before it answers it.
	reqs := o.Requests()
	if o.Count() != 1 || len(reqs) != 1 || o.Conns() != 1 || len(o.Partial()) != 0 {
		t.Fatalf("origin: count=%d requests=%d conns=%d partial=%d, want exactly 1 request on 1 connection", o.Count(), len(reqs), o.Conns(), len(o.Partial()))
	}
	if !bytes.Equal(reqs[0].Raw, []byte(sent)) {
		t.Errorf("origin received\n%q\nwant the bytes sent\n%q", reqs[0].Raw, sent)
	}
	if v := reqs[0].Header.Values("Proxy-Authorization"); len(v) != 0 {
		t.Errorf("origin received Proxy-Authorization %q", v)
	}
}

// TestSquidInterop runs CONNECT tunnels to HTTP and HTTPS origins, a
// CONNECT refused by an access rule and Basic proxy authentication
// against a real squid, and checks squid's access log against what the
// subtests did.
func TestSquidInterop(t *testing.T) {
	bin := squidBinary(t)
	// The denied port has a live origin behind it, so a 403 can only be
	// squid's access rule, never a failed connection.
	forbidden := squidOrigin(t, false)
	sq := startSquid(t, bin, int(netip.MustParseAddrPort(forbidden.Addr()).Port()))

	// Reference: "HTTP and HTTPS proxy hops establish transparent CONNECT
	// tunnels"; TLS with the origin runs inside the tunnel.
	t.Run("tunnel", func(t *testing.T) {
		for _, originTLS := range []bool{false, true} {
			for _, via := range []string{"DialChain", "DialRoute"} {
				name := map[bool]string{false: "http", true: "https"}[originTLS] + "-origin/" + via
				t.Run(name, func(t *testing.T) {
					o := squidOrigin(t, originTLS)
					b := route.Start(SystemClock.Now(), squidBudget)
					ctx := context.Background()
					var c net.Conn
					var err error
					switch via {
					case "DialChain":
						c, err = DialChain(ctx, nil, []Hop{{Hop: sq.open}}, o.Addr(), b)
						if err == nil && originTLS {
							c, err = HandshakeOrigin(ctx, nil, c, o.ClientTLSConfig(), b)
						}
					case "DialRoute":
						c, err = DialRoute(ctx, nil, squidRoute(t, o, sq.open), nil, o.ClientTLSConfig(), b)
					}
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					sq.expect("TCP_TUNNEL/200", o.Addr(), "-")
					if originTLS {
						tc, ok := c.(*tls.Conn)
						if !ok || !tc.ConnectionState().PeerCertificates[0].Equal(o.Certificate()) {
							t.Fatalf("connection is not TLS with the origin: %T", c)
						}
					}
					squidExchange(t, c, o, "/squid/"+name)
				})
			}
		}
	})

	// Reference: a CONNECT status outside 2xx fails; here squid's own
	// refusal by an access rule.
	t.Run("denied-port", func(t *testing.T) {
		c, err := DialChain(context.Background(), nil, []Hop{{Hop: sq.open}}, forbidden.Addr(), route.Start(SystemClock.Now(), squidBudget))
		if err == nil {
			c.Close()
			t.Fatal("CONNECT to the denied port opened a tunnel")
		}
		var ce *ConnectError
		if !errors.As(err, &ce) {
			t.Fatalf("error %T %v, want *ConnectError", err, err)
		}
		sq.expect("TCP_DENIED/403", forbidden.Addr(), "-")
		if ce.StatusCode != http.StatusForbidden || ce.Hop != 1 || ce.Proxy != sq.open.Addr() || ce.Target != forbidden.Addr() {
			t.Errorf("ConnectError = %+v, want 403 from hop 1 (%s) for %s", ce, sq.open.Addr(), forbidden.Addr())
		}
		if v := ce.Header.Get("X-Squid-Error"); !strings.HasPrefix(v, "ERR_ACCESS_DENIED") {
			t.Errorf("X-Squid-Error = %q, want ERR_ACCESS_DENIED", v)
		}
		if n := forbidden.Conns(); n != 0 {
			t.Errorf("denied origin accepted %d connections, want 0", n)
		}
	})

	// Squid's Basic authentication on the second port, checked by the
	// test's helper: credentials reach squid and never the origin.
	t.Run("basic-auth", func(t *testing.T) {
		o := squidOrigin(t, false)
		for _, tc := range []struct {
			name string
			auth *Auth
			user string // as squid logs it
		}{
			{"none", nil, "-"},
			{"wrong-password", &Auth{Username: squidUser, Password: squidPassword + "!"}, squidUser},
		} {
			hop, cfg := sq.auth, []HopConfig(nil)
			if tc.auth != nil {
				hop.CredentialID = tc.auth.Username + "#" + tc.name
				cfg = []HopConfig{{Auth: tc.auth}}
			}
			c, err := DialRoute(context.Background(), nil, squidRoute(t, o, hop), cfg, nil, route.Start(SystemClock.Now(), squidBudget))
			if err == nil {
				c.Close()
				t.Fatalf("%s: tunnel opened without valid credentials", tc.name)
			}
			var ce *ConnectError
			if !errors.As(err, &ce) || ce.StatusCode != http.StatusProxyAuthRequired {
				t.Fatalf("%s: error %v, want a *ConnectError with 407", tc.name, err)
			}
			sq.expect("TCP_DENIED/407", o.Addr(), tc.user)
			want := `Basic realm="` + squidRealm + `"`
			if len(ce.ProxyAuthenticate) != 1 || ce.ProxyAuthenticate[0] != want {
				t.Errorf("%s: Proxy-Authenticate %q, want [%s]", tc.name, ce.ProxyAuthenticate, want)
			}
		}
		if n := o.Conns(); n != 0 {
			t.Fatalf("origin accepted %d connections before valid credentials, want 0", n)
		}
		hop := sq.auth
		hop.CredentialID = squidUser + "#1"
		cfg := []HopConfig{{Auth: &Auth{Username: squidUser, Password: squidPassword}}}
		c, err := DialRoute(context.Background(), nil, squidRoute(t, o, hop), cfg, nil, route.Start(SystemClock.Now(), squidBudget))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sq.expect("TCP_TUNNEL/200", o.Addr(), squidUser)
		squidExchange(t, c, o, "/squid/basic-auth")
	})

	if !t.Failed() {
		sq.checkAccessLog(t)
	}
}
