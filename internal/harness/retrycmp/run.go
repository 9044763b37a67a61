package retrycmp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/replaysafetest"
)

// Run sizes and bounds.
const (
	// DefaultRuns is how many times Run runs each scenario per client.
	DefaultRuns = 30
	// QuickRuns is the runs per scenario and client with Options.Quick.
	QuickRuns = 3
	// LoadWindow bounds the one call of the multiplied-load row.
	LoadWindow = 10 * time.Second
	// QuickLoadWindow is LoadWindow with Options.Quick. It is 2.5 s, not
	// 3 s: retryablehttp's third attempt is due 1 s + 2 s after the
	// first (DefaultBackoff), so a 3 s window would race it.
	QuickLoadWindow = 2500 * time.Millisecond
	// callTimeout bounds the target call of every other row. The slowest
	// peer here, retryablehttp, needs at most the Retry-After 2 s.
	callTimeout = 10 * time.Second
	// maxParallelRuns bounds the runs in flight, each with its own
	// server and client instance.
	maxParallelRuns = 64
	// maxRuns bounds Options.Runs.
	maxRuns = 1000
)

// Options configures Run.
type Options struct {
	// Runs is how many times each scenario runs per client (the
	// multiplied-load row runs once). Zero means DefaultRuns, or
	// QuickRuns with Quick; at most 1000.
	Runs int
	// Quick runs QuickRuns times and cuts the load window to
	// QuickLoadWindow.
	Quick bool
	// Clients are the clients compared, in column order; nil means
	// Peers().
	Clients []Client
}

// Row is what one client did on one scenario, over all its runs. Copies
// are complete copies of the target request as the server received them.
type Row struct {
	// Scenario is the scenario's short name, e.g. "post-crossing".
	Scenario string
	// Letter names the scenario in the comparison list (a to f).
	Letter string
	// Title says what the server does.
	Title string
	// Client is the client's name.
	Client string
	// Runs is the number of runs.
	Runs int
	// Window bounds the call: the load window or the call timeout.
	Window time.Duration
	// MinCopies, MaxCopies and TotalCopies count copies per run.
	MinCopies, MaxCopies, TotalCopies int
	// SideEffect reports that the target is a POST, so a second copy
	// duplicates a side effect the server may already have carried out.
	SideEffect bool
	// Duplicated is the number of runs in which the server received more
	// than one copy.
	Duplicated int
	// Identical is the number of duplicated runs whose copies were all
	// byte-identical (request line, header section and body).
	Identical int
	// Altered is the number of runs in which a copy's body differed from
	// the body the caller gave: a retry that sent a consumed body again.
	Altered int
	// Partial is the number of incomplete copies, over all runs.
	Partial int
	// Fresh is the number of warm runs whose first copy did not go out on
	// the warmed connection, so the scenario did not happen as scripted.
	Fresh int
	// Outcomes tallies how the calls ended, most frequent first.
	Outcomes []Tally
	// Example is the first error message seen, or "".
	Example string
	// Fastest and Slowest are the shortest and the longest call: the
	// waits a client made between its attempts.
	Fastest, Slowest time.Duration
}

// Tally is how many runs ended with one outcome.
type Tally struct {
	// Outcome is a status code ("200") or "error" and a class ("error
	// eof", "error RS18 eof"); see OutcomeClass.
	Outcome string
	// Runs is the number of runs that ended so.
	Runs int
}

// run is what one run measured.
type run struct {
	outcome  string
	errText  string
	copies   int
	partial  int
	fresh    bool
	altered  bool
	same     bool // every copy is byte-identical to the first
	duration time.Duration
}

// RowCount is the number of rows Run returns with the default clients
// (Peers): one per scenario and client.
func RowCount() int { return len(scenarios) * len(Peers()) }

// Run runs every scenario against every client, each run with its own
// server and client instance, up to maxParallelRuns at a time, and
// returns one Row per scenario and client, in scenario order then client
// order. It fails if ctx ends or a server cannot start or a warm-up
// request fails.
func Run(ctx context.Context, o Options) ([]Row, error) {
	runs, window := o.Runs, LoadWindow
	if o.Quick {
		window = QuickLoadWindow
	}
	if runs == 0 {
		runs = DefaultRuns
		if o.Quick {
			runs = QuickRuns
		}
	}
	if runs < 0 || runs > maxRuns {
		return nil, fmt.Errorf("retrycmp: Runs %d: want 0 to %d", runs, maxRuns)
	}
	clients := o.Clients
	if clients == nil {
		clients = Peers()
	}
	rows := make([]Row, 0, len(scenarios)*len(clients))
	results := make([][]run, 0, cap(rows))
	type job struct {
		row, run int
		sc       scenario
		c        Client
	}
	var jobs []job
	for _, sc := range scenarios {
		n, limit := runs, callTimeout
		if sc.load {
			n, limit = 1, window
		}
		for _, c := range clients {
			rows = append(rows, Row{
				Scenario: sc.id, Letter: sc.letter, Title: sc.title, Client: c.Name,
				Runs: n, Window: limit, SideEffect: sc.sideEffect(),
			})
			results = append(results, make([]run, n))
			for i := range n {
				jobs = append(jobs, job{len(rows) - 1, i, sc, c})
			}
		}
	}
	// The load rows take longest: start them first.
	slices.SortStableFunc(jobs, func(a, b job) int {
		return cmp.Compare(rows[b.row].Window, rows[a.row].Window)
	})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, maxParallelRuns)
		errOnce  sync.Once
		firstErr error
	)
	for _, j := range jobs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r, err := runOnce(ctx, j.sc, j.c, rows[j.row].Window)
			if err != nil {
				errOnce.Do(func() {
					firstErr = fmt.Errorf("retrycmp: %s, %s, run %d: %w", j.sc.id, j.c.Name, j.run+1, err)
					cancel()
				})
				return
			}
			results[j.row][j.run] = r
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].add(results[i])
	}
	return rows, nil
}

// add sums the runs of one row.
func (r *Row) add(runs []run) {
	counts := map[string]int{}
	for i, x := range runs {
		if i == 0 || x.copies < r.MinCopies {
			r.MinCopies = x.copies
		}
		r.MaxCopies = max(r.MaxCopies, x.copies)
		r.TotalCopies += x.copies
		r.Partial += x.partial
		if x.copies > 1 {
			r.Duplicated++
			if x.same {
				r.Identical++
			}
		}
		if x.altered {
			r.Altered++
		}
		if x.fresh {
			r.Fresh++
		}
		if r.Example == "" {
			r.Example = x.errText
		}
		if i == 0 || x.duration < r.Fastest {
			r.Fastest = x.duration
		}
		r.Slowest = max(r.Slowest, x.duration)
		counts[x.outcome]++
	}
	for o, n := range counts {
		r.Outcomes = append(r.Outcomes, Tally{o, n})
	}
	slices.SortFunc(r.Outcomes, func(a, b Tally) int {
		return cmp.Or(cmp.Compare(b.Runs, a.Runs), cmp.Compare(a.Outcome, b.Outcome))
	})
}

// runOnce runs sc once against a fresh instance of c: start the server,
// warm up if the scenario says so, send the target under limit, stop the
// server and count what it received.
func runOnce(ctx context.Context, sc scenario, c Client, limit time.Duration) (run, error) {
	srv, err := replaysafetest.Start(sc.config())
	if err != nil {
		return run{}, err
	}
	defer srv.Close()
	s := c.New()
	defer s.Close()
	if sc.warm {
		wctx, cancel := context.WithTimeout(ctx, callTimeout)
		out := s.Send(wctx, Request{Method: http.MethodGet, URL: srv.URL() + warmPath})
		cancel()
		if out.Err != nil || out.Status != http.StatusOK {
			return run{}, fmt.Errorf("warm-up: %s", OutcomeClass(out))
		}
	}
	req := Request{Method: sc.method, URL: srv.URL() + targetPath, Body: sc.body}
	if sc.body != BodyNone {
		req.Payload = payload
	}
	cctx, cancel := context.WithTimeout(ctx, limit)
	start := time.Now()
	out := s.Send(cctx, req)
	d := time.Since(start)
	cancel()
	if err := ctx.Err(); err != nil {
		return run{}, err
	}
	// Stop the server before counting, so that no copy lands after.
	s.Close()
	srv.Close()
	r := run{outcome: OutcomeClass(out), duration: d, same: true}
	if out.Err != nil {
		r.errText = out.Err.Error()
	}
	var first []byte
	for _, q := range srv.Requests() {
		if q.Target != targetPath {
			continue
		}
		if r.copies == 0 {
			first = q.Raw
			r.fresh = sc.warm && (q.Conn != 0 || q.Seq != 1)
		}
		r.copies++
		r.same = r.same && bytes.Equal(q.Raw, first)
		r.altered = r.altered || !bytes.Equal(q.Body, req.Payload)
	}
	for _, q := range srv.Partial() {
		if q.Target == targetPath || q.Target == "" {
			r.partial++
		}
	}
	return r, nil
}

// OutcomeClass names how a call ended: its status code, or "error" and a
// class of the cause: "eof" (the connection closed), "reset", "deadline",
// "canceled" or "other", with the rule first when replaysafe decided
// ("error RS18 eof").
func OutcomeClass(o Outcome) string {
	if o.Err == nil {
		return strconv.Itoa(o.Status)
	}
	class := "other"
	switch err := o.Err; {
	case errors.Is(err, context.DeadlineExceeded):
		class = "deadline"
	case errors.Is(err, context.Canceled):
		class = "canceled"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		class = "eof"
	case errors.Is(err, syscall.ECONNRESET):
		class = "reset"
	}
	if rerr, ok := errors.AsType[*replaysafe.Error](o.Err); ok {
		return "error " + rerr.Rule.ID() + " " + class
	}
	return "error " + class
}
