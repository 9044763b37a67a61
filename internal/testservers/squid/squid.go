// Package squid runs Debian's squid for tests: one squid per test, on
// loopback ports of its own, with a configuration written into the test's
// temporary directory, stopped (its helpers and shared memory included)
// when the test ends. CI installs squid with .ci/setup; elsewhere a test
// that needs it skips when it is missing, and fails when CI=true.
//
// StockRules reads the access rules of the machine's stock squid.conf,
// so a test can run squid exactly as it ships (it refuses CONNECT to
// every port but 443, and plain http to ports outside Safe_ports).
package squid

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
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
)

const (
	// startWait bounds the wait for squid's ports to accept connections.
	startWait = 15 * time.Second
	// poll is the pause between two probes, at start and at stop.
	poll = 25 * time.Millisecond
	// stopWait is how long squid may take to exit after SIGTERM before
	// it is killed. With shutdown_lifetime 0 it takes about 2 s.
	stopWait = 10 * time.Second
	// helperWait bounds the wait for squid's helpers to exit once squid
	// has: they exit when their stdin reaches end of file.
	helperWait = time.Second
	// attempts bounds the launches: a port picked free can be taken by
	// someone else before squid binds it.
	attempts = 3

	// Realm, User and Password are the Basic credentials of the
	// authenticating port (Config.Auth).
	Realm    = "replaysafe-squid"
	User     = "alice"
	Password = "wonderland"
)

// authHelper is squid's Basic authentication helper, run by /bin/sh (so
// a noexec temporary directory does not matter). Squid writes one "user
// password" line per check and reads OK or ERR.
const authHelper = `# Written by internal/testservers/squid.
while read -r user pass; do
	if [ "$user" = '` + User + `' ] && [ "$pass" = '` + Password + `' ]; then
		echo OK
	else
		echo ERR
	fi
done
`

// Config is what a test's squid allows.
type Config struct {
	// Rules are the access rules, acl and http_access lines in order:
	// StockRules, or a test's own.
	Rules []string
	// Auth adds a second port that requires Basic credentials (User,
	// Password) before any rule of Rules applies.
	Auth bool
	// Extra holds more directives (timeouts, say).
	Extra []string
}

// Server is a running squid.
type Server struct {
	// Open is the port without authentication; Auth the one that
	// requires it (zero without Config.Auth).
	Open, Auth route.Hop
	// Dir holds the configuration, the helper and the logs.
	Dir string

	svc     string // the service name (-n), which names squid's shared memory segments
	cmd     *exec.Cmd
	cancel  context.CancelFunc
	exited  chan struct{} // closed when Wait has returned
	waitErr error         // Wait's result, once exited is closed
	stopped bool
}

// seq makes service names unique within the process.
var seq atomic.Int32

// Binary finds squid or skips the test; in CI, where .ci/setup installs
// it, a missing squid is a failure.
func Binary(t testing.TB) string {
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

// StockRules returns the access rules of the machine's stock
// /etc/squid/squid.conf (and the conf.d files it includes, in place):
// its acl and http_access lines, in order. A missing file skips the test,
// or fails it when CI=true.
func StockRules(t testing.TB) []string {
	t.Helper()
	const stock = "/etc/squid/squid.conf"
	rules, err := readRules(stock, 0)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("reading squid's stock configuration: %v", err)
		}
		t.Skipf("no stock squid configuration: %v", err)
	}
	if len(rules) == 0 {
		t.Fatalf("%s holds no access rules", stock)
	}
	return rules
}

// readRules collects the acl and http_access lines of the file at path,
// following include lines up to a small depth.
func readRules(path string, depth int) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch f := strings.Fields(line); {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
		case f[0] == "acl" || f[0] == "http_access":
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = strings.TrimSpace(line[:i])
			}
			out = append(out, line)
		case f[0] == "include" && len(f) == 2 && depth < 4:
			files, err := filepath.Glob(f[1])
			if err != nil {
				return nil, err
			}
			for _, inc := range files {
				more, err := readRules(inc, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, more...)
			}
		}
	}
	return out, sc.Err()
}

// conf is the whole configuration but the access rules and extras: the
// verbs fill in, in order, the open port, the effective-user line, and
// the directory for the pid file, the logs and core dumps (four times).
const conf = `# Written by internal/testservers/squid: a loopback forward proxy for one test.
http_port 127.0.0.1:%d name=open
visible_hostname replaysafe-squid-test
%s
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

// Start starts squid (the binary bin) configured by cfg and stops it at
// the end of the test.
func Start(t testing.TB, bin string, cfg Config) *Server {
	t.Helper()
	dir, userLine := tempDir(t)
	vctx, vcancel := context.WithTimeout(context.Background(), startWait)
	defer vcancel()
	if out, err := exec.CommandContext(vctx, bin, "-v").Output(); err == nil {
		first, _, _ := bytes.Cut(out, []byte("\n"))
		t.Logf("%s: %s", bin, first)
	}
	for attempt := 1; ; attempt++ {
		openPort, authPort := freePorts(t)
		var b strings.Builder
		fmt.Fprintf(&b, conf, openPort, userLine, dir, dir, dir, dir)
		s := &Server{
			Open: route.Hop{Kind: route.ProxyHTTP, Host: "127.0.0.1", Port: uint16(openPort)},
			Dir:  dir,
			svc:  "replaysafe" + strconv.Itoa(os.Getpid()) + "n" + strconv.Itoa(int(seq.Add(1))),
		}
		if cfg.Auth {
			helper := filepath.Join(dir, "basic_auth.sh")
			if err := os.WriteFile(helper, []byte(authHelper), 0o644); err != nil {
				t.Fatal(err)
			}
			s.Auth = route.Hop{Kind: route.ProxyHTTP, Host: "127.0.0.1", Port: uint16(authPort)}
			fmt.Fprintf(&b, "http_port 127.0.0.1:%d name=auth\n", authPort)
			fmt.Fprintf(&b, "auth_param basic program /bin/sh %s\nauth_param basic children 1 startup=0 idle=1\nauth_param basic realm %s\n", helper, Realm)
			b.WriteString("acl rs_auth_port myportname auth\nacl rs_authed proxy_auth REQUIRED\nhttp_access deny rs_auth_port !rs_authed\n")
		}
		for _, r := range cfg.Rules {
			b.WriteString(r + "\n")
		}
		for _, x := range cfg.Extra {
			b.WriteString(x + "\n")
		}
		confPath := filepath.Join(dir, "squid.conf")
		if err := os.WriteFile(confPath, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		err := s.launch(bin, confPath)
		if err == nil {
			t.Cleanup(func() {
				if err := s.Stop(); err != nil {
					t.Error(err)
				}
				if t.Failed() {
					s.LogFiles(t)
				}
			})
			return s
		}
		t.Logf("squid launch %d of %d: %v", attempt, attempts, err)
		if serr := s.Stop(); serr != nil {
			t.Error(serr)
		}
		if attempt == attempts {
			s.LogFiles(t)
			t.Fatalf("squid did not start: %v", err)
		}
	}
}

// tempDir returns the directory for squid's files and the configuration
// line naming the user squid runs as. Squid refuses to run as root: when
// started as root it switches to cache_effective_user, so the directory
// is handed to that user ("proxy" on Debian) and the test's temporary
// parent directory, which the testing package creates with mode 0700, is
// made traversable.
func tempDir(t testing.TB) (dir, userLine string) {
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
func freePorts(t testing.TB) (int, int) {
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

// launch starts squid in the foreground (-N: no daemon, one process that
// is master and worker) and waits until both ports accept connections.
func (s *Server) launch(bin, confPath string) error {
	stderr, err := os.Create(filepath.Join(s.Dir, "squid.stderr"))
	if err != nil {
		return err
	}
	defer stderr.Close() // the child has its own descriptor
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.cmd = exec.CommandContext(ctx, bin, "-N", "-n", s.svc, "-f", confPath)
	s.cmd.Dir = s.Dir
	s.cmd.Stdout, s.cmd.Stderr = stderr, stderr // files: exec starts no copying goroutine
	// Should the test binary die without cleanup (a -timeout panic, a
	// signal), squid gets SIGTERM. The kernel clears this setting when
	// squid switches users, so it only helps when not started as root.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	s.cmd.Cancel = func() error { return s.cmd.Process.Signal(syscall.SIGTERM) }
	s.cmd.WaitDelay = stopWait
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
	addrs := []string{s.Open.Addr()}
	if s.Auth.Port != 0 {
		addrs = append(addrs, s.Auth.Addr())
	}
	deadline := time.Now().Add(startWait)
	for i := 0; i < int(startWait/poll) && time.Now().Before(deadline); i++ {
		select {
		case <-s.exited:
			return fmt.Errorf("squid exited before accepting connections (%v); stderr: %s", s.waitErr, readTail(filepath.Join(s.Dir, "squid.stderr")))
		default:
		}
		ready := 0
		for _, a := range addrs {
			if c, err := net.DialTimeout("tcp4", a, poll); err == nil {
				c.Close()
				ready++
			}
		}
		if ready == len(addrs) {
			return nil
		}
		time.Sleep(poll)
	}
	return fmt.Errorf("squid's ports %v did not accept connections within %v", addrs, startWait)
}

// Stop ends squid with SIGTERM (SIGKILL after stopWait) and reaps
// it, then checks that none of its helpers outlived it. It removes any
// shared memory segment of squid's service name: squid removes them when
// it exits cleanly, not when it is killed. Calls after the first do
// nothing.
func (s *Server) Stop() error {
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
		errs = append(errs, fmt.Errorf("squid did not exit within %v of SIGTERM: %v", stopWait, st))
	}
	// A helper started after that look still names the test's
	// directory on its command line.
	left := running(append(helpers, mentioning(s.Dir)...))
	for i := 0; len(left) > 0 && i < int(helperWait/poll); i++ {
		time.Sleep(poll)
		left = running(left)
	}
	if len(left) > 0 {
		for _, p := range left {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
		errs = append(errs, fmt.Errorf("squid's helpers %v still ran %v after it exited: killed", left, helperWait))
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

// LogFiles puts squid's logs into the test log.
func (s *Server) LogFiles(t testing.TB) {
	t.Helper()
	for _, f := range []string{"squid.stderr", "cache.log", "access.log"} {
		t.Logf("squid %s:\n%s", f, readTail(filepath.Join(s.Dir, f)))
	}
}

// Entry is one transaction of squid's access.log.
type Entry struct {
	// Result is squid's code and the status, "TCP_MISS/200" say.
	Result string
	// Method and URL are the request's; User the authenticated user or
	// "-".
	Method, URL, User string
}

// AccessLog stops squid, which flushes access.log, and returns the
// transactions it logged, leaving out the readiness probes (connections
// closed before a request).
func (s *Server) AccessLog(t testing.TB) []Entry {
	t.Helper()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []Entry
	for line := range strings.Lines(string(b)) {
		// time elapsed client code/status bytes method URL user hierarchy type
		f := strings.Fields(line)
		if len(f) < 8 || f[5] == "-" {
			continue
		}
		out = append(out, Entry{Result: f[3], Method: f[5], URL: f[6], User: f[7]})
	}
	return out
}
