package interop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/replaysafe/replaysafe/internal/harness/tracecheck"
)

// FullRuns is the number of runs of every row in a full run.
const FullRuns = 30

// Config configures Run.
type Config struct {
	// Runs is the number of runs of every row; zero means FullRuns, or
	// each row's quick count when Quick is set.
	Runs int
	// Quick runs each row a few times only (the go test mode).
	Quick bool
	// Servers, if not empty, limits the rows to these servers ("nginx",
	// "haproxy", "caddy").
	Servers []string
	// Match, if set, limits the rows to those whose ID it matches.
	Match *regexp.Regexp
	// Dir holds the servers' directories; "" means a new temporary
	// directory, removed at the end.
	Dir string
}

// Summary is what Run measured.
type Summary struct {
	// Results holds one entry per row and client, in table order.
	Results []Result
	// Versions maps each server run to its version line.
	Versions map[string]string
	// Missing lists the servers that are not installed (their rows were
	// skipped), with the reason.
	Missing map[string]string
	// Traces is the number of replaysafe attempt traces checked by
	// package tracecheck.
	Traces int
	// Failures lists the safety bounds broken, the deliveries replaysafe
	// missed where it must deliver, and the trace check's failures.
	Failures []string
	// Wall is how long Run took.
	Wall time.Duration
}

// Servers lists the servers of the rows, in table order.
var Servers = []string{"nginx", "haproxy", "caddy"}

// Run runs the real-server rows against the installed servers and prints
// one table per server to w. Servers that are missing are listed in the
// Summary and skipped with one line. The error is non-nil when a row
// could not run or when Summary.Failures is not empty.
func Run(ctx context.Context, w io.Writer, cfg Config) (Summary, error) {
	began := time.Now()
	sum := Summary{Versions: map[string]string{}, Missing: map[string]string{}}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "replaysafe-interop-")
		if err != nil {
			return sum, fmt.Errorf("interop: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	certs, err := NewCerts(dir)
	if err != nil {
		return sum, err
	}
	var checker tracecheck.Checker
	var errs []error
	// Nothing here is random: the idle-crossing offsets are a fixed
	// sweep; what varies between runs is the servers' and the
	// scheduler's timing.
	fmt.Fprintln(w, "Real servers (copies counted per X-Request-Id at the server; no randomness: crossing offsets are a fixed sweep)")
	for _, server := range Servers {
		if len(cfg.Servers) > 0 && !contains(cfg.Servers, server) {
			continue
		}
		var rows []Row
		for _, r := range Rows() {
			if r.Server == server && (cfg.Match == nil || cfg.Match.MatchString(r.ID)) {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		v, err := Version(server)
		if err != nil {
			sum.Missing[server] = err.Error()
			fmt.Fprintf(w, "\n%s: skipped: %v\n", server, err)
			continue
		}
		sum.Versions[server] = v
		fmt.Fprintf(w, "\n%s (%s)\n", server, v)
		for _, row := range rows {
			fmt.Fprintf(w, "  %s: %s\n", row.ID, row.Title)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(Columns, "\t")+"\t")
		var notes []string
		for i, row := range rows {
			runs := cfg.Runs
			if runs == 0 {
				runs = FullRuns
				if cfg.Quick {
					runs = row.quickRuns()
				}
			}
			maxRuns := runs
			if row.Shows == ShowsCrossing {
				maxRuns = runs + (crossingBatches(cfg.Quick)-1)*max(runs, row.Parallel)
			}
			rdir := filepath.Join(dir, fmt.Sprintf("%s-%02d", server, i))
			if err := os.MkdirAll(rdir, 0o700); err != nil {
				return sum, fmt.Errorf("interop: %w", err)
			}
			if cfg.Quick && row.quickSkip != "" {
				var kept []string
				for _, c := range row.Clients {
					if c != row.quickSkip {
						kept = append(kept, c)
					}
				}
				row.Clients = kept
			}
			results, err := runRow(ctx, row, runs, maxRuns, rdir, certs, &checker)
			if err != nil {
				errs = append(errs, fmt.Errorf("row %s: %w", row.ID, err))
				fmt.Fprintf(tw, "%s\terror: %v\t\n", row.ID, err)
				continue
			}
			for _, res := range results {
				sum.Results = append(sum.Results, res)
				fmt.Fprintln(tw, strings.Join(res.Cells(), "\t")+"\t")
				if u := res.Unsafe(); u != "" {
					sum.Failures = append(sum.Failures, fmt.Sprintf("%s %s: unsafe: %s", res.Row, res.Client, u))
				}
				if m := row.Shows.Missing(res); m != "" {
					sum.Failures = append(sum.Failures, fmt.Sprintf("%s %s: meant to show %v: %s", res.Row, res.Client, row.Shows, m))
				}
				if res.Client == Replaysafe && row.MustDeliver && res.Delivered != res.Requests {
					sum.Failures = append(sum.Failures, fmt.Sprintf("%s %s: delivered %d of %d (first error: %s)", res.Row, res.Client, res.Delivered, res.Requests, res.FirstErr))
				}
				if res.Client == Replaysafe && row.Once && (res.MaxCopies > 1 || res.Lost > 0) {
					sum.Failures = append(sum.Failures, fmt.Sprintf("%s %s: not each request once at the server: max %d copies, %d lost", res.Row, res.Client, res.MaxCopies, res.Lost))
				}
				if res.Client == Replaysafe && row.ConnsAtMost != "" {
					for _, peer := range results {
						if peer.Client != row.ConnsAtMost {
							continue
						}
						if m := moreConnsThan(res, peer); m != "" {
							sum.Failures = append(sum.Failures, fmt.Sprintf("%s %s: more connections than %s: %s", res.Row, res.Client, peer.Client, m))
						}
					}
				}
				if row.ConnsAtMost != "" && res.ConnsPerRun != nil {
					notes = append(notes, fmt.Sprintf("  %s %s, connections per run: %v", res.Row, res.Client, res.ConnsPerRun))
				}
				if res.FirstErr != "" {
					notes = append(notes, fmt.Sprintf("  %s %s, first error: %s", res.Row, res.Client, clip(res.FirstErr, 160)))
				}
			}
			if row.Note != "" {
				notes = append(notes, fmt.Sprintf("  %s: %s", row.ID, row.Note))
			}
		}
		tw.Flush()
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	sum.Traces = checker.Checked()
	if err := checker.Err(); err != nil {
		sum.Failures = append(sum.Failures, err.Error())
	}
	sum.Wall = time.Since(began)
	fmt.Fprintf(w, "\n%d replaysafe attempt traces checked by tracecheck; %d failures; %s\n", sum.Traces, len(sum.Failures), sum.Wall.Round(100*time.Millisecond))
	for _, f := range sum.Failures {
		fmt.Fprintf(w, "FAIL %s\n", f)
	}
	if len(sum.Failures) > 0 {
		errs = append(errs, fmt.Errorf("%d failures", len(sum.Failures)))
	}
	if err := errors.Join(errs...); err != nil {
		return sum, fmt.Errorf("interop: %w", err)
	}
	return sum, nil
}

// crossingBatches is how many batches of runs a crossing row makes at
// most: which runs cross the server's close depends on timing, so while
// no request of replaysafe's has crossed it (Result.Crossed), another
// batch runs the same sweep, every client again, as many runs at once
// as the row's Parallel allows (a batch takes about one keep-alive
// timeout however many run in it). In the full mode a row crosses in
// the first batch on an idle machine; four quick runs often do not, and
// on a loaded machine (the suite beside a race run of another package)
// replaysafe's window, between its check of an idle connection and the
// request reaching the server, is tens of microseconds against timers'
// jitter of milliseconds: 16 quick batches of four once missed it in
// every one of 64 runs. Batches past the first cost only a row that
// has not crossed yet.
func crossingBatches(quick bool) int {
	if quick {
		return 16
	}
	return 8
}

// runRow starts the row's server, runs its clients side by side (one
// after another for a row that restarts its server) in batches of runs,
// more batches up to maxRuns while a crossing row has not crossed, and
// tallies each client.
func runRow(ctx context.Context, row Row, runs, maxRuns int, dir string, certs *Certs, checker *tracecheck.Checker) ([]Result, error) {
	t, err := row.start(dir, certs)
	if err != nil {
		return nil, err
	}
	defer func() { t.stop() }()
	n := len(row.Clients)
	var (
		mu       sync.Mutex // guards everything below and firstErr
		allRuns  = make([][]run, n)
		dials    = make([]int64, n)
		resends  = make([]int64, n)
		crossed  = make([]int64, n)
		observed = make([]bool, n) // the client reports its attempts (replaysafe)
		unknown  = make([]bool, n) // the client's connections are not counted
		firstErr error
	)
	one := func(ci int, name string, first int) {
		par := max(row.Parallel, 1)
		sem := make(chan struct{}, par)
		out := make([]run, runs)
		var wg sync.WaitGroup
		for i := range runs {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				c, err := newClient(name, row.Wire, certs.TLS(), checker, row.client)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				defer c.close()
				out[i] = row.run(ctx, &runEnv{t: t, c: c, n: first + i, prefix: shortName(name)})
				out[i].conns = c.dials.Load()
				mu.Lock()
				defer mu.Unlock()
				unknown[ci] = unknown[ci] || c.unknownConns
				dials[ci] += c.dials.Load()
				if c.resends != nil {
					observed[ci] = true
					resends[ci] += c.resends.Load()
					crossed[ci] += c.crossed.Load()
				}
			})
		}
		wg.Wait()
		mu.Lock()
		allRuns[ci] = append(allRuns[ci], out...)
		mu.Unlock()
	}
	batch := func(first int) {
		if row.Parallel == 1 {
			for ci, name := range row.Clients {
				one(ci, name, first)
			}
			return
		}
		var wg sync.WaitGroup
		for ci, name := range row.Clients {
			wg.Go(func() { one(ci, name, first) })
		}
		wg.Wait()
	}
	ri := slices.Index(row.Clients, Replaysafe)
	for done := 0; ; {
		batch(done)
		done += runs
		if row.Shows == ShowsCrossing {
			runs = max(runs, row.Parallel) // the next batches: as many at once as the row allows
		}
		if firstErr != nil {
			return nil, firstErr
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if row.Shows != ShowsCrossing || ri < 0 || crossed[ri] > 0 || done+runs > maxRuns {
			break
		}
	}
	// Let the server finish logging requests whose clients went away.
	if err := waitCtx(ctx, 300*time.Millisecond); err != nil {
		return nil, err
	}
	counts, err := t.counter.Counts()
	if err != nil {
		return nil, err
	}
	var h3 map[string]int
	if pc, ok := t.counter.(ProtoCounter); ok {
		if h3, err = pc.H3Counts(); err != nil {
			return nil, err
		}
	}
	results := make([]Result, n)
	for ci, name := range row.Clients {
		d := dials[ci]
		if unknown[ci] {
			d = -1
		}
		results[ci] = result(row.ID, name, allRuns[ci], counts, h3, d)
		if observed[ci] {
			results[ci].Resends, results[ci].Crossed = int(resends[ci]), int(crossed[ci])
		}
	}
	return results, nil
}

func (r Row) quickRuns() int {
	if r.Parallel == 1 {
		return 1
	}
	return 4
}

// shortName makes a client name fit request ids.
func shortName(name string) string {
	return strings.NewReplacer("/", "-", ".", "-").Replace(name)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Rows returns the real-server rows, in table order.
func Rows() []Row {
	const idle = time.Second
	const spread = 5 * time.Millisecond
	h1 := []string{Replaysafe, NetHTTP}
	h2 := []string{Replaysafe, NetHTTP, XNetHTTP2}
	methods := []string{http.MethodGet, http.MethodPut, http.MethodPost}
	var rows []Row
	for _, tls := range []bool{false, true} {
		name := "nginx-h1"
		if tls {
			name = "nginx-h1-tls"
		}
		for _, m := range methods {
			rows = append(rows, Row{
				ID: name + "-idle-1s/" + m, Server: "nginx", Wire: WireH1, Clients: h1, Parallel: 15,
				Title:       "keepalive_timeout 1s; the " + m + " is sent 1s ± 5ms after the first response",
				MustDeliver: m != http.MethodPost,
				Shows:       ShowsCrossing,
				start:       startNginx(NginxConfig{TLS: tls, KeepaliveTimeout: "1s"}),
				run:         crossing(m, idle, spread),
			})
		}
	}
	for _, m := range []string{http.MethodPut, http.MethodPost} {
		rows = append(rows, Row{
			ID: "nginx-h1-idle-1s-client-900ms/" + m, Server: "nginx", Wire: WireH1, Clients: h1, Parallel: 15, MustDeliver: true,
			Title:  "as nginx-h1-idle-1s, with the clients' IdleConnTimeout 900ms, below nginx's keepalive_timeout",
			start:  startNginx(NginxConfig{KeepaliveTimeout: "1s"}),
			run:    crossing(m, idle, spread),
			client: clientOptions{idle: 900 * time.Millisecond},
		})
	}
	for _, kr := range []struct {
		n   int
		tls bool
	}{{1, false}, {2, false}, {2, true}} {
		id := fmt.Sprintf("nginx-h1-requests-%d", kr.n)
		if kr.tls {
			id = fmt.Sprintf("nginx-h1-tls-requests-%d", kr.n)
		}
		rows = append(rows, Row{
			ID: id, Server: "nginx", Wire: WireH1, Clients: h1, Parallel: 10, MustDeliver: true,
			Title: fmt.Sprintf("keepalive_requests %d; 6 requests (GET, PUT, POST) one after another", kr.n),
			start: startNginx(NginxConfig{TLS: kr.tls, KeepaliveRequests: kr.n}),
			run:   sequence(6),
		})
	}
	for _, n := range []int{32, 64} {
		rows = append(rows, Row{
			ID: fmt.Sprintf("nginx-h2-requests-10/burst-%d", n), Server: "nginx", Wire: WireH2, Clients: h2, Parallel: 5, MustDeliver: true, Shows: ShowsResend,
			quickSkip: XNetHTTP2, // its GOAWAY backoff takes seconds a run
			Title:     fmt.Sprintf("keepalive_requests 10 (GOAWAY after 10 streams); %d requests at once, GET and POST alternating", n),
			start:     startNginx(NginxConfig{TLS: true, HTTP2: true, KeepaliveRequests: 10}),
			run:       burst(n),
		})
	}
	rows = append(rows, Row{
		ID: "nginx-h2c-requests-10/burst-64-GET", Server: "nginx", Wire: WireH2C, Clients: []string{Replaysafe, NetHTTP}, Parallel: 5,
		MustDeliver: true, Once: true, Shows: ShowsResend, ConnsAtMost: NetHTTP,
		Title: "h2c (prior knowledge), keepalive_requests 10 (GOAWAY after 10 streams); 64 GETs at once; replaysafe dials no more connections than net/http in any run",
		Note:  "the requests above the GOAWAY's last stream were not processed (RFC 9113 section 6.8) and are resent; replaysafe's displaced requests share one redial per connection lost, net/http's h2c client dials through its HTTP/1.1 pool, a connection for each request that finds none ready, and waits 1, 2, 4 s before its second, third and fourth GOAWAY retries",
		start: startNginx(NginxConfig{HTTP2: true, KeepaliveRequests: 10}),
		run:   burstGET(64),
	}, Row{
		ID: "nginx-h2-streams-4/burst-32", Server: "nginx", Wire: WireH2, Clients: h2, Parallel: 5, MustDeliver: true, quickSkip: XNetHTTP2,
		Title: "http2_max_concurrent_streams 4; 32 requests at once, GET and POST alternating",
		start: startNginx(NginxConfig{TLS: true, HTTP2: true, MaxConcurrentStreams: 4}),
		run:   burst(32),
	}, Row{
		ID: "nginx-h2-preread-1k/first-POST", Server: "nginx", Wire: WireH2, Clients: h2, Parallel: 10, Shows: ShowsResend,
		Title: "http2_body_preread_size 1k; a POST with a body as the first request of a new connection",
		Note:  "nginx refuses (RST_STREAM REFUSED_STREAM) a stream that carries data before the client acknowledged its SETTINGS when the preread size is below 64k; the refused request was not processed and may be sent again",
		start: startNginx(NginxConfig{TLS: true, HTTP2: true, BodyPreread: "1k"}),
		run:   sequence0(http.MethodPost),
	})
	for _, m := range methods {
		rows = append(rows, Row{
			ID: "nginx-h2-idle-1s/" + m, Server: "nginx", Wire: WireH2, Clients: h2, Parallel: 15, MustDeliver: m != http.MethodPost, Shows: ShowsCrossing,
			Title: "keepalive_timeout 1s (idle GOAWAY); the " + m + " is sent 1s ± 5ms after the first response",
			start: startNginx(NginxConfig{TLS: true, HTTP2: true, KeepaliveTimeout: "1s"}),
			run:   crossing(m, idle, spread),
		})
	}
	for _, front := range []struct {
		name    string
		wire    Wire
		clients []string
	}{{"h1", WireH1, h1}, {"h2", WireH2, h2}} {
		for _, m := range methods {
			rows = append(rows, Row{
				ID: "haproxy-" + front.name + "-keepalive-1s/" + m, Server: "haproxy", Wire: front.wire, Clients: front.clients, Parallel: 15,
				MustDeliver: m != http.MethodPost,
				Shows:       ShowsCrossing,
				Title:       "timeout http-keep-alive 1s; the " + m + " is sent 1s ± 5ms after the first response",
				start:       startHAProxy(front.name, "1s"),
				run:         crossing(m, idle, spread),
			})
		}
	}
	for _, p := range []struct {
		id      string
		wire    Wire
		clients []string
		shows   Point
	}{
		{"caddy-h3/http3", WireH3, []string{Replaysafe, QuicGo}, ShowsHTTP3},
		{"caddy-h3/prefer-http3", WirePreferH3, []string{Replaysafe}, ShowsHTTP3},
		{"caddy-h3/discover-http3", WireDiscoverH3, []string{Replaysafe}, ShowsDiscovery},
	} {
		rows = append(rows, Row{
			ID: p.id, Server: "caddy", Wire: p.wire, Clients: p.clients, Parallel: 10, MustDeliver: true, Shows: p.shows,
			Title: "HTTP/3 with Alt-Svc; 6 requests (GET, PUT, POST) one after another",
			start: startCaddy,
			run:   sequence(6),
		})
	}
	quicIdle := &quic.Config{MaxIdleTimeout: 2 * time.Second, KeepAlivePeriod: time.Second}
	rows = append(rows, Row{
		ID: "caddy-h3-restart/GET", Server: "caddy", Wire: WireH3, Clients: []string{Replaysafe, QuicGo}, Parallel: 1, Shows: ShowsHTTP3,
		Title:  "a GET, caddy stopped gracefully (SIGINT) and started again on the same port, at once a GET on the same client; QUIC MaxIdleTimeout 2s",
		Note:   "caddy 2.6 closes no QUIC connection on its way down: the GET goes out on the dead connection and fails when MaxIdleTimeout passes (a timeout, not resent: RS06); wall/run is that wait",
		start:  startCaddy,
		run:    restart(http.MethodGet, false, 0),
		client: clientOptions{quic: quicIdle},
	}, Row{
		ID: "caddy-h3-kill/GET", Server: "caddy", Wire: WireH3, Clients: []string{Replaysafe, QuicGo}, Parallel: 1, Shows: ShowsHTTP3,
		Title:  "a GET, caddy killed (SIGKILL) and started again, at once a GET on the same client; QUIC MaxIdleTimeout 2s",
		start:  startCaddy,
		run:    restart(http.MethodGet, true, 0),
		client: clientOptions{quic: quicIdle},
	}, Row{
		ID: "caddy-h3-kill-wait/GET", Server: "caddy", Wire: WireH3, Clients: []string{Replaysafe, QuicGo}, Parallel: 1, MustDeliver: true, Shows: ShowsHTTP3,
		Title:  "as caddy-h3-kill, but the GET waits 3.5s, past MaxIdleTimeout (2s) plus KeepAlivePeriod (1s)",
		Note:   "the unanswered keep-alive PING ends the dead connection MaxIdleTimeout after it was sent (the idle timer restarts when it goes out, RFC 9000 section 10.1), so KeepAlivePeriod + MaxIdleTimeout after the last packet received; a request after that dials afresh",
		start:  startCaddy,
		run:    restart(http.MethodGet, true, 3500*time.Millisecond),
		client: clientOptions{quic: quicIdle},
	})
	return rows
}

// sequence0 is a run of one request on a fresh client.
func sequence0(method string) func(ctx context.Context, e *runEnv) run {
	return func(ctx context.Context, e *runEnv) run {
		start := time.Now()
		r := e.do(ctx, method, 0)
		return run{requests: []request{r}, wall: time.Since(start)}
	}
}

func startNginx(c NginxConfig) func(dir string, certs *Certs) (*target, error) {
	return func(dir string, certs *Certs) (*target, error) {
		n, err := StartNginx(dir, c, certs)
		if err != nil {
			return nil, err
		}
		return &target{url: n.URL, counter: n, counted: "access log", stop: n.Stop}, nil
	}
}

func startHAProxy(front, keepAlive string) func(dir string, certs *Certs) (*target, error) {
	return func(dir string, certs *Certs) (*target, error) {
		h, err := StartHAProxy(dir, keepAlive, certs)
		if err != nil {
			return nil, err
		}
		url := h.H1URL
		if front == "h2" {
			url = h.H2URL
		}
		return &target{url: url, counter: h.Origin, counted: "origin", stop: h.Stop}, nil
	}
}

func startCaddy(dir string, certs *Certs) (*target, error) {
	c, err := StartCaddy(dir, certs)
	if err != nil {
		return nil, err
	}
	return &target{url: c.URL, counter: c, counted: "access log", caddy: c, stop: func() { c.Stop() }}, nil
}
