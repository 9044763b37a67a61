package conformance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe"
)

// StreamEnv is what an HTTP/2 or HTTP/3 scenario's steps drive: one
// scripted server, at URL, and one client. A new StreamEnv is made for
// every run.
type StreamEnv struct {
	// URL is the scripted server's base URL.
	URL    string
	Client http.RoundTripper

	ctx      context.Context
	deadline time.Duration // bounds the target request when set
	elapsed  time.Duration // the target request's round trip
}

func (e *StreamEnv) newRequest(ctx context.Context, method, path string, body Body) (*http.Request, error) {
	var r io.Reader
	switch body {
	case Buffered:
		r = strings.NewReader("hello")
	case OneShot:
		r = &oneShot{strings.NewReader("hello")}
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, r)
	if err != nil {
		return nil, err
	}
	if body == OneShot {
		req.ContentLength = 5
	}
	return req, nil
}

// Warm sends GET /warm and reads its 200 response to the end.
func (e *StreamEnv) Warm() error {
	req, err := e.newRequest(e.ctx, http.MethodGet, "/warm", NoBody)
	if err != nil {
		return err
	}
	resp, err := e.Client.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("conformance: /warm: %w", err)
	}
	if err := finish(resp); err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("conformance: /warm: status %d, %v", resp.StatusCode, err)
	}
	return nil
}

// Target sends the counted request, reads its whole response, and
// records how long the call took.
func (e *StreamEnv) Target(method string, body Body) Result {
	ctx := e.ctx
	if e.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.deadline)
		defer cancel()
	}
	req, err := e.newRequest(ctx, method, TargetPath, body)
	if err != nil {
		return Result{Err: err}
	}
	start := time.Now()
	defer func() { e.elapsed = time.Since(start) }()
	resp, err := e.Client.RoundTrip(req)
	if err != nil {
		return Result{Err: err}
	}
	if err := finish(resp); err != nil {
		return Result{Err: err}
	}
	return Result{Status: resp.StatusCode}
}

// warmThenStream warms connection 0 up and sends the target on it.
func warmThenStream(method string, body Body) func(env *StreamEnv) (Result, error) {
	return func(env *StreamEnv) (Result, error) {
		if err := env.Warm(); err != nil {
			return Result{}, err
		}
		return env.Target(method, body), nil
	}
}

// targetStream sends the target on a new connection.
func targetStream(method string, body Body) func(env *StreamEnv) (Result, error) {
	return func(env *StreamEnv) (Result, error) { return env.Target(method, body), nil }
}

// receipt is one request stream a scripted server recorded.
type receipt struct {
	path, method string
	body         []byte
}

// countCopies sets r.Copies and r.Identical from what the server
// received for TargetPath.
func (r *Run) countCopies(got []receipt) {
	r.Identical = true
	var first string
	for _, q := range got {
		if q.path != TargetPath {
			continue
		}
		sig := q.method + " " + string(q.body)
		if r.Copies == 0 {
			first = sig
		} else if !strings.HasPrefix(first, sig) && !strings.HasPrefix(sig, first) {
			// A stream refused on its headers carries less of the body
			// than its copies; only differing bytes count as different.
			r.Identical = false
		}
		r.Copies++
	}
}

// streamRun ends one run of a stream scenario: it closes the client's
// idle connections and the server, then counts what the server received
// (receipts, read after the close so that nothing arrives later).
func streamRun(res Result, setup error, closeIdle func(), closeServer func() error, receipts func() []receipt, rules *targetRules) Run {
	closeIdle()
	closeServer()
	r := Run{Status: res.Status, Err: res.Err, Setup: setup}
	r.countCopies(receipts())
	r.Rules = rules.String()
	return r
}

// runStreamCase runs once n times (a peer at most peerRuns times, when
// set) and sums the runs up in a Report.
func runStreamCase(name, title, network, client string, want Want, checked bool, peerRuns, n int, once func() (Run, time.Duration)) Report {
	rep := Report{Case: name, Title: title, Network: network, Client: client, Identical: true, OK: true, Want: want}
	if client != Replaysafe && peerRuns > 0 {
		n = min(n, peerRuns)
	}
	var slowest time.Duration
	for range n {
		r, elapsed := once()
		slowest = max(slowest, elapsed)
		rep.add(r, checked)
	}
	rep.Measured = !checked
	rep.Elapsed = slowest.Round(100 * time.Microsecond).String()
	return rep
}

// runJobs runs the jobs, several at once, and returns their reports in
// the jobs' order.
func runJobs(jobs []func() Report) []Report {
	reps := make([]Report, len(jobs))
	ch := make(chan int)
	var wg sync.WaitGroup
	for range max(runtime.GOMAXPROCS(0), 1) {
		wg.Go(func() {
			for i := range ch {
				reps[i] = jobs[i]()
			}
		})
	}
	for i := range jobs {
		ch <- i
	}
	close(ch)
	wg.Wait()
	return reps
}

// targetRules records the rule IDs that ended replaysafe's attempts at
// TargetPath.
type targetRules struct {
	mu  sync.Mutex
	ids []string
}

func (r *targetRules) observer() replaysafe.Observer {
	return replaysafe.Observer{OnAttempt: func(a replaysafe.AttemptReport) {
		if a.Request.URL.Path == TargetPath {
			r.mu.Lock()
			r.ids = append(r.ids, a.Decision.Rule.ID())
			r.mu.Unlock()
		}
	}}
}

// String joins the IDs with commas, in attempt order.
func (r *targetRules) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.ids, ",")
}
