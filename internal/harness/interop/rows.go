package interop

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// target is a started server as a row sees it.
type target struct {
	// url is where the row's requests go.
	url string
	// counter counts the copies the server received.
	counter Counter
	// counted says where: "access log" or "origin".
	counted string
	// caddy is set for the caddy rows (the restart row restarts it).
	caddy *Caddy
	stop  func()
}

// request is one request a run made and what came of it.
type request struct {
	id, method string
	status     int
	protoMajor int
	err        error
}

// run is what one run of a row did.
type run struct {
	requests []request
	wall     time.Duration
	// conns is the connections the run's client dialed (set by runRow).
	conns int64
}

// Row is one real-server case: a server configuration, how each run
// drives a fresh client, and the clients it is run with.
type Row struct {
	// ID names the row ("nginx-h1-idle-1s/PUT").
	ID string
	// Server is "nginx", "haproxy" or "caddy": the binary the row needs.
	Server string
	// Title says what happens, in words.
	Title string
	// Wire is how the clients speak.
	Wire Wire
	// Clients are the clients the row runs, replaysafe first.
	Clients []string
	// Parallel is how many runs go at once (1: one after another).
	Parallel int
	// MustDeliver says replaysafe is expected to deliver every request
	// of every run; the safety bounds hold for every row and client
	// anyway.
	MustDeliver bool
	// Shows is what the row exists to show; the row fails when its runs
	// did not show it (Point.Missing).
	Shows Point
	// ConnsAtMost, when set, names a client of the row whose connections
	// bound replaysafe's: in every run replaysafe dials no more than that
	// client did in the run of the same number.
	ConnsAtMost string
	// Once says each of replaysafe's requests must reach the server
	// exactly once (none resent after it was processed, none lost).
	Once bool
	// Note is shown under the table.
	Note   string
	start  func(dir string, certs *Certs) (*target, error)
	run    func(ctx context.Context, e *runEnv) run
	client clientOptions
	// quickSkip is a client left out in the quick mode.
	quickSkip string
}

// runEnv is what one run gets: n numbers the run in the row (request ids
// carry it, and the crossing sweep places the run by it).
type runEnv struct {
	t      *target
	c      *client
	n      int // the run's number, counted across batches
	prefix string
}

// id returns the id of the run's k-th request.
func (e *runEnv) id(k int) string { return fmt.Sprintf("%s.%d.%d", e.prefix, e.n, k) }

// do sends one request with the run's k-th id and reads the response.
func (e *runEnv) do(ctx context.Context, method string, k int) request {
	r := request{id: e.id(k), method: method}
	var body io.Reader
	if method == http.MethodPut || method == http.MethodPost {
		body = bytes.NewReader(bytes.Repeat([]byte("x"), 256))
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.t.url+"/"+r.id, body)
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set(IDHeader, r.id)
	resp, err := e.c.rt.RoundTrip(req)
	if err != nil {
		r.err = err
		return r
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r.status, r.protoMajor, r.err = resp.StatusCode, resp.ProtoMajor, err
	return r
}

// crossing is a run that warms a connection with a GET, waits idle for
// the server's keep-alive timeout plus an offset, and sends method on
// it: the request meets the server's close.
//
// The offsets follow the close. Each client's runs keep a window
// [lo, hi] of offsets, from -spread to +spread at first; run n waits at
// the fraction sweep(n) of it, so that every batch lands between the
// offsets the earlier ones tried. A request that went out on the warm
// connection was early (lo moves up to its offset), one that found the
// connection closed and dialed afresh without crossing was late (hi
// moves down to it): the window closes in on the moment the server
// closes, which on a loaded machine comes later than its timeout by more
// than spread, and a window pushed against one of its ends grows that
// way. A crossing (the window is tens of microseconds wide) teaches
// nothing and keeps the window.
func crossing(method string, timeout, spread time.Duration) func(ctx context.Context, e *runEnv) run {
	edges := &closeEdges{spread: spread, by: map[string]*closeEdge{}}
	return func(ctx context.Context, e *runEnv) run {
		warm := e.do(ctx, http.MethodGet, 0)
		offset := edges.offset(e.prefix, e.n)
		if waitCtx(ctx, timeout+offset) != nil {
			return run{requests: []request{warm}}
		}
		crossedBefore := int64(0)
		if e.c.crossed != nil {
			crossedBefore = e.c.crossed.Load()
		}
		start := time.Now()
		r := e.do(ctx, method, 1)
		out := run{requests: []request{warm, r}, wall: time.Since(start)}
		switch {
		case e.c.dials == nil, e.c.crossed != nil && e.c.crossed.Load() > crossedBefore:
		case e.c.dials.Load() <= 1 && r.err == nil:
			edges.learn(e.prefix, offset, true) // the warm connection served it
		case e.c.dials.Load() > 1:
			edges.learn(e.prefix, offset, false) // it found the close behind it
		}
		return out
	}
}

// closeEdges holds, per client, the window of offsets a crossing row's
// runs try (crossing).
type closeEdges struct {
	spread time.Duration
	mu     sync.Mutex
	by     map[string]*closeEdge
}

// closeEdge is one client's window: offsets at or below lo went out
// early, at or above hi late.
type closeEdge struct{ lo, hi time.Duration }

// minEdge is the narrowest window: below it the window opens again
// around its middle (the close moves from run to run on a loaded
// machine, and runs in one batch learn at once).
const minEdge = 200 * time.Microsecond

func (c *closeEdges) edge(name string) *closeEdge {
	e, ok := c.by[name]
	if !ok {
		e = &closeEdge{lo: -c.spread, hi: c.spread}
		c.by[name] = e
	}
	return e
}

// offset returns run n's offset for the client name.
func (c *closeEdges) offset(name string, n int) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.edge(name)
	return e.lo + time.Duration(float64(e.hi-e.lo)*sweep(n))
}

// learn moves the client's window after a run at offset that went out
// early or late.
func (c *closeEdges) learn(name string, offset time.Duration, early bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.edge(name)
	if early {
		e.lo = max(e.lo, offset)
		if e.hi-e.lo < minEdge { // pushed against the top: look later
			e.hi = e.lo + c.spread
		}
	} else {
		e.hi = min(e.hi, offset)
		if e.hi-e.lo < minEdge { // pushed against the bottom: look earlier
			e.lo = e.hi - c.spread
		}
	}
}

// sweep returns the base-2 radical inverse of n, in [0, 1): 0, 1/2, 1/4,
// 3/4, 1/8, 5/8... (the van der Corput sequence): each run halves the
// largest gap the earlier ones left.
func sweep(n int) float64 {
	f, scale := 0.0, 0.5
	for u := uint(n); u > 0; u >>= 1 {
		if u&1 == 1 {
			f += scale
		}
		scale /= 2
	}
	return f
}

// sequence is a run of n requests one after another, cycling GET, PUT
// and POST, on one client.
func sequence(n int) func(ctx context.Context, e *runEnv) run {
	methods := []string{http.MethodGet, http.MethodPut, http.MethodPost}
	return func(ctx context.Context, e *runEnv) run {
		var out run
		start := time.Now()
		for k := 0; k < n; k++ {
			out.requests = append(out.requests, e.do(ctx, methods[k%len(methods)], k))
		}
		out.wall = time.Since(start)
		return out
	}
}

// burst is a run of n requests at once on a fresh client, GET and POST
// alternating.
func burst(n int) func(ctx context.Context, e *runEnv) run {
	return func(ctx context.Context, e *runEnv) run {
		out := run{requests: make([]request, n)}
		start := time.Now()
		var wg sync.WaitGroup
		for k := 0; k < n; k++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				m := http.MethodGet
				if k%2 == 1 {
					m = http.MethodPost
				}
				out.requests[k] = e.do(ctx, m, k)
			}(k)
		}
		wg.Wait()
		out.wall = time.Since(start)
		return out
	}
}

// burstGET is a run of n GETs at once on a fresh client.
func burstGET(n int) func(ctx context.Context, e *runEnv) run {
	return func(ctx context.Context, e *runEnv) run {
		out := run{requests: make([]request, n)}
		start := time.Now()
		var wg sync.WaitGroup
		for k := range n {
			wg.Go(func() { out.requests[k] = e.do(ctx, http.MethodGet, k) })
		}
		wg.Wait()
		out.wall = time.Since(start)
		return out
	}
}

// restart is a run that sends a GET, restarts caddy (a graceful stop,
// or a kill that closes nothing), waits wait, and sends method on the
// same client.
func restart(method string, kill bool, wait time.Duration) func(ctx context.Context, e *runEnv) run {
	return func(ctx context.Context, e *runEnv) run {
		first := e.do(ctx, http.MethodGet, 0)
		if kill {
			e.t.caddy.Kill()
		} else {
			e.t.caddy.Stop()
		}
		if err := e.t.caddy.Start(); err != nil {
			return run{requests: []request{first, {id: e.id(1), method: method, err: err}}}
		}
		if waitCtx(ctx, wait) != nil {
			return run{requests: []request{first}}
		}
		start := time.Now()
		r := e.do(ctx, method, 1)
		return run{requests: []request{first, r}, wall: time.Since(start)}
	}
}

// Result is one row's outcome for one client.
type Result struct {
	// Row and Client name it.
	Row, Client string
	// Runs is the number of runs.
	Runs int
	// Requests counts the requests made, Delivered those that got a 200
	// and their whole body, Errors the others.
	Requests, Delivered, Errors int
	// Copies is the sum of the copies the server received; MaxCopies the
	// most one request got; Lost the requests it never received.
	Copies, MaxCopies, Lost int
	// DuplicatePOST counts POST requests received more than once.
	DuplicatePOST int
	// Conns is the number of connections the clients dialed, -1 when
	// unknown; ConnsPerRun the connections of each run, in run order
	// (nil when unknown).
	Conns       int
	ConnsPerRun []int
	// Resends counts replaysafe's resent attempts, -1 for the other
	// clients (they do not tell).
	Resends int
	// Crossed counts replaysafe's attempts that crossed the server's
	// close (written on a reused connection that then failed before a
	// response byte), -1 for the other clients.
	Crossed int
	// H3 counts responses that came over HTTP/3; H3Runs the runs with at
	// least one.
	H3, H3Runs int
	// ServerH3 counts the copies the server logged as HTTP/3, -1 when it
	// cannot tell (haproxy's origin).
	ServerH3 int
	// Wall is the mean duration of the timed part of a run.
	Wall time.Duration
	// FirstErr is the first error seen, if any.
	FirstErr string
}

// Unsafe returns what breaks the safety bounds: a request received more
// than twice, or a POST received twice.
func (r Result) Unsafe() string {
	var p []string
	if r.MaxCopies > 2 {
		p = append(p, fmt.Sprintf("a request was received %d times", r.MaxCopies))
	}
	if r.DuplicatePOST > 0 {
		p = append(p, fmt.Sprintf("%d POST requests were received twice", r.DuplicatePOST))
	}
	return strings.Join(p, "; ")
}

// Point is what a row exists to show. A row whose runs did not show it
// shows nothing, whatever its other columns say, and fails.
type Point uint8

// Points.
const (
	// ShowsNothing: the row checks the safety bounds and deliveries only.
	ShowsNothing Point = iota
	// ShowsCrossing: a request crossed the server's close, as replaysafe's
	// attempts report it (Result.Crossed).
	ShowsCrossing
	// ShowsResend: replaysafe resent a request (Result.Resends).
	ShowsResend
	// ShowsHTTP3: every response delivered came over HTTP/3, and the
	// server logged copies over HTTP/3 (Result.H3, Result.ServerH3).
	ShowsHTTP3
	// ShowsDiscovery: every run moved to HTTP/3 (Result.H3Runs), and the
	// server logged copies over HTTP/3.
	ShowsDiscovery
)

// Missing says how res falls short of what p needs, or "" when it shows
// it. Crossings and resends are replaysafe's, from its observer; HTTP/3
// holds for every client of the row.
func (p Point) Missing(res Result) string {
	serverH3 := func() string {
		if res.ServerH3 == 0 || res.ServerH3 > 0 && res.ServerH3 < res.H3 {
			return fmt.Sprintf("; the server logged %d copies over HTTP/3, for %d HTTP/3 responses", res.ServerH3, res.H3)
		}
		return ""
	}
	switch {
	case p == ShowsCrossing && res.Client == Replaysafe && res.Crossed <= 0:
		return "no request crossed the server's close"
	case p == ShowsResend && res.Client == Replaysafe && res.Resends <= 0:
		return "no request was resent"
	case p == ShowsHTTP3 && (res.Delivered == 0 || res.H3 != res.Delivered || serverH3() != ""):
		return fmt.Sprintf("%d of %d responses delivered came over HTTP/3%s", res.H3, res.Delivered, serverH3())
	case p == ShowsDiscovery && (res.H3Runs != res.Runs || serverH3() != ""):
		return fmt.Sprintf("%d of %d runs moved to HTTP/3%s", res.H3Runs, res.Runs, serverH3())
	}
	return ""
}

// String names the point for the tables.
func (p Point) String() string {
	switch p {
	case ShowsCrossing:
		return "a crossing"
	case ShowsResend:
		return "a resend"
	case ShowsHTTP3:
		return "HTTP/3"
	case ShowsDiscovery:
		return "HTTP/3 discovered"
	}
	return "-"
}

// result tallies a row's runs for one client against the server's
// counts (h3: the copies it logged over HTTP/3, nil when it cannot tell).
func result(row, clientName string, runs []run, counts, h3 map[string]int, dials int64) Result {
	res := Result{Row: row, Client: clientName, Runs: len(runs), Conns: int(dials), Resends: -1, Crossed: -1, ServerH3: -1}
	if h3 != nil {
		res.ServerH3 = 0
	}
	var wall time.Duration
	for _, r := range runs {
		wall += r.wall
		if dials >= 0 {
			res.ConnsPerRun = append(res.ConnsPerRun, int(r.conns))
		}
		h3Run := false
		for _, q := range r.requests {
			if h3 != nil {
				res.ServerH3 += h3[q.id]
			}
			res.Requests++
			if q.err == nil && q.status == http.StatusOK {
				res.Delivered++
			} else {
				res.Errors++
				if res.FirstErr == "" {
					if q.err != nil {
						res.FirstErr = q.err.Error()
					} else {
						res.FirstErr = fmt.Sprintf("status %d", q.status)
					}
				}
			}
			if q.protoMajor == 3 {
				res.H3++
				h3Run = true
			}
			n := counts[q.id]
			res.Copies += n
			if n > res.MaxCopies {
				res.MaxCopies = n
			}
			if n == 0 {
				res.Lost++
			}
			if n > 1 && q.method == http.MethodPost {
				res.DuplicatePOST++
			}
		}
		if h3Run {
			res.H3Runs++
		}
	}
	if len(runs) > 0 {
		res.Wall = wall / time.Duration(len(runs))
	}
	return res
}

// moreConnsThan lists the runs in which res dialed more connections than
// peer did in the run of the same number, "" when none did.
func moreConnsThan(res, peer Result) string {
	if res.ConnsPerRun == nil || peer.ConnsPerRun == nil {
		return "connections per run unknown"
	}
	var p []string
	for i, n := range res.ConnsPerRun {
		if i < len(peer.ConnsPerRun) && n > peer.ConnsPerRun[i] {
			p = append(p, fmt.Sprintf("run %d: %d > %d", i, n, peer.ConnsPerRun[i]))
		}
	}
	return strings.Join(p, "; ")
}
