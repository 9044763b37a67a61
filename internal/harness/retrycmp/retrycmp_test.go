package retrycmp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testRuns is the runs per scenario and client in TestPeers: as many as
// the report's table, so the test asserts what the table shows.
const testRuns = DefaultRuns

// expect is what one client does on one scenario, in every run.
type expect struct {
	// copies the server receives.
	copies int
	// outcome is the call's end, as OutcomeClass names it.
	outcome string
	// altered: the later copies carry another body than the caller's.
	altered bool
	// wait is the least time the call takes: the client's backoff
	// before its retry.
	wait time.Duration
}

// Module sources cited below, under $(go env GOMODCACHE):
//
//	RH = github.com/hashicorp/go-retryablehttp@v0.7.8/client.go
//	RY = github.com/go-resty/resty/v2@v2.17.2
//	NH = $(go env GOROOT)/src/net/http (Go 1.26.8)
var (
	// net/http resends by itself only on a reused connection and only a
	// request it calls replayable: GET, HEAD, OPTIONS, TRACE or one with
	// Idempotency-Key (NH request.go isReplayable; transport.go
	// shouldRetryRequest). A PUT is not in that list, so the PUT crossing
	// a close fails with the bare EOF (transport.go roundTrip strips
	// transportReadFromServerError). It never retries on a status.
	netHTTP = map[string]expect{
		"post-crossing":         {copies: 1, outcome: "error eof"},
		"post-503":              {copies: 1, outcome: "503"},
		"put-crossing":          {copies: 1, outcome: "error eof"},
		"get-retry-after":       {copies: 1, outcome: "503"},
		"get-fail-all":          {copies: 1, outcome: "503"},
		"oneshot-post-503":      {copies: 1, outcome: "503"},
		"oneshot-post-crossing": {copies: 1, outcome: "error eof"},
	}
	// replaysafe with the zero Options resends once, at once, an
	// ambiguous failure on a reused connection only when the method is
	// idempotent and the body reproducible (RS20, then RS02 delivers);
	// a POST fails with RS18 (ambiguous-not-idempotent). No configured
	// retries yet, so a status is delivered as it came.
	replaysafeDefault = map[string]expect{
		"post-crossing":         {copies: 1, outcome: "error RS18 eof"},
		"post-503":              {copies: 1, outcome: "503"},
		"put-crossing":          {copies: 2, outcome: "200"},
		"get-retry-after":       {copies: 1, outcome: "503"},
		"get-fail-all":          {copies: 1, outcome: "503"},
		"oneshot-post-503":      {copies: 1, outcome: "503"},
		"oneshot-post-crossing": {copies: 1, outcome: "error RS18 eof"},
	}
	// replaysafe with Retry{MaxAttempts: 5} retries what the call rules
	// allow: the PUT by its automatic resend (RS20), the GET's 503 after
	// its Retry-After (RS23), and every 503 of the failing server until
	// the five attempts are made (RS26 delivers the last; the waits,
	// full jitter under 100, 200, 400 and 800 ms, end within the quick
	// window). The POST, keyless, keeps one copy whatever it got back.
	replaysafeRetry = map[string]expect{
		"post-crossing":         {copies: 1, outcome: "error RS18 eof"},
		"post-503":              {copies: 1, outcome: "503"},
		"put-crossing":          {copies: 2, outcome: "200"},
		"get-retry-after":       {copies: 2, outcome: "200", wait: 2 * time.Second},
		"get-fail-all":          {copies: 5, outcome: "503"},
		"oneshot-post-503":      {copies: 1, outcome: "503"},
		"oneshot-post-crossing": {copies: 1, outcome: "error RS18 eof"},
	}
	// retryablehttp's DefaultRetryPolicy (RH:472) calls baseRetryPolicy
	// (RH:495), which retries every transport error but a few URL errors
	// (redirects, scheme, header, certificate), and every status 429, 0
	// and 500-599 but 501, whatever the method: so the processed POST is
	// sent again, byte for byte, because Do rewinds the body before every
	// attempt (RH:693). A one-shot io.Reader is read into memory before
	// the first attempt (getBodyReaderAndContentLength, RH:204, case
	// io.Reader at RH:277), so its copies are identical too. DefaultBackoff (RH:551)
	// waits Retry-After on 429 and 503, else 2^n × RetryWaitMin (1 s),
	// capped at RetryWaitMax (30 s); RetryMax 4 (RH:51). Under a server
	// that fails everything the attempts go at 0, 1, 3, 7 and 15 s: two
	// within QuickLoadWindow (the third is due at 3 s, after 2.5 s), four
	// within LoadWindow (TestLoadWindow).
	retryableDefault = map[string]expect{
		"post-crossing":         {copies: 2, outcome: "200", wait: time.Second},
		"post-503":              {copies: 2, outcome: "200", wait: time.Second},
		"put-crossing":          {copies: 2, outcome: "200", wait: time.Second},
		"get-retry-after":       {copies: 2, outcome: "200", wait: 2 * time.Second},
		"get-fail-all":          {copies: 2, outcome: "error deadline", wait: QuickLoadWindow},
		"oneshot-post-503":      {copies: 2, outcome: "200", wait: time.Second},
		"oneshot-post-crossing": {copies: 2, outcome: "200", wait: time.Second},
	}
	// resty's default RetryCount is 0, and Execute then calls execute
	// once, without Backoff (RY request.go:1047).
	restyDefault = map[string]expect{
		"post-crossing":         {copies: 1, outcome: "error eof"},
		"post-503":              {copies: 1, outcome: "503"},
		"put-crossing":          {copies: 1, outcome: "error eof"},
		"get-retry-after":       {copies: 1, outcome: "503"},
		"get-fail-all":          {copies: 1, outcome: "503"},
		"oneshot-post-503":      {copies: 1, outcome: "503"},
		"oneshot-post-crossing": {copies: 1, outcome: "error eof"},
	}
	// With SetRetryCount(3) and no conditions, Backoff (RY retry.go:96)
	// retries when the attempt returned an error that is not a
	// noRetryErr ("needsRetry := err != nil && err == err1"), whatever
	// the method, and never on a status: the 503 rows deliver the 503
	// and Retry-After is not read (RetryAfter is nil, retry.go:184).
	// The first wait is jitterBackoff(100 ms, 2 s, 0) (retry.go:209):
	// 50 ms plus up to 50 ms, raised to the 100 ms minimum. Each attempt
	// builds a new http.Request from Request.Body (createHTTPRequest, RY
	// middleware.go:224): a []byte is kept in bodyBuf and sent again
	// intact, but an io.Reader is the caller's reader, already consumed
	// by the first attempt, so the retry carries an empty chunked body
	// (and, the Content-Type set by the first attempt now being in the
	// header, an Accept field too, middleware.go:183).
	restyRetry3 = map[string]expect{
		"post-crossing":         {copies: 2, outcome: "200", wait: 100 * time.Millisecond},
		"post-503":              {copies: 1, outcome: "503"},
		"put-crossing":          {copies: 2, outcome: "200", wait: 100 * time.Millisecond},
		"get-retry-after":       {copies: 1, outcome: "503"},
		"get-fail-all":          {copies: 1, outcome: "503"},
		"oneshot-post-503":      {copies: 1, outcome: "503"},
		"oneshot-post-crossing": {copies: 2, outcome: "200", altered: true, wait: 100 * time.Millisecond},
	}
)

// TestPeers runs every scenario DefaultRuns times per client, with the
// quick load window, and asserts what each client did in every run.
func TestPeers(t *testing.T) {
	t.Parallel()
	want := map[string]map[string]expect{
		NetHTTP().Name:         netHTTP,
		Replaysafe().Name:      replaysafeDefault,
		ReplaysafeRetry().Name: replaysafeRetry,
		RetryableHTTP().Name:   retryableDefault,
		Resty().Name:           restyDefault,
		RestyRetry(3).Name:     restyRetry3,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := Run(ctx, Options{Runs: testRuns, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, n := len(rows), len(scenarios)*len(want); got != n {
		t.Fatalf("%d rows, want %d", got, n)
	}
	for _, r := range rows {
		w, ok := want[r.Client][r.Scenario]
		if !ok {
			t.Errorf("%s, %s: no expectation", r.Scenario, r.Client)
			continue
		}
		checkRow(t, r, w)
	}
	if t.Failed() {
		var b strings.Builder
		Print(&b, rows)
		t.Log("\n" + b.String())
	}
}

// checkRow asserts that every run of r did what w says.
func checkRow(t *testing.T, r Row, w expect) {
	t.Helper()
	name := r.Scenario + ", " + r.Client
	wantRuns := testRuns
	if r.Window == QuickLoadWindow {
		wantRuns = 1
	}
	if r.Runs != wantRuns {
		t.Errorf("%s: %d runs, want %d", name, r.Runs, wantRuns)
	}
	if r.MinCopies != w.copies || r.MaxCopies != w.copies || r.TotalCopies != w.copies*r.Runs {
		t.Errorf("%s: copies min/max/total %d/%d/%d, want %d in every run",
			name, r.MinCopies, r.MaxCopies, r.TotalCopies, w.copies)
	}
	if len(r.Outcomes) != 1 || r.Outcomes[0] != (Tally{w.outcome, r.Runs}) {
		t.Errorf("%s: outcomes %v, want %q in every run (first error: %s)", name, r.Outcomes, w.outcome, r.Example)
	}
	dup := 0
	if w.copies > 1 {
		dup = r.Runs
	}
	if r.Duplicated != dup {
		t.Errorf("%s: %d duplicated runs, want %d", name, r.Duplicated, dup)
	}
	identical, altered := dup, 0
	if w.altered {
		identical, altered = 0, r.Runs
	}
	if r.Identical != identical || r.Altered != altered {
		t.Errorf("%s: %d runs with identical copies, %d with an altered body; want %d and %d",
			name, r.Identical, r.Altered, identical, altered)
	}
	if r.Partial != 0 || r.Fresh != 0 {
		t.Errorf("%s: %d partial copies, %d runs off the warmed connection; want none", name, r.Partial, r.Fresh)
	}
	if r.Fastest < w.wait {
		t.Errorf("%s: fastest call %v, want at least the backoff %v", name, r.Fastest, w.wait)
	}
	if sc := scenarioByID(t, r.Scenario); r.SideEffect != (sc.method == http.MethodPost) {
		t.Errorf("%s: SideEffect %v for %s", name, r.SideEffect, sc.method)
	}
}

// TestReplaysafeResendsAtOnce: replaysafe's automatic resend of the PUT
// waits for nothing ("Resending happens immediately on a new connection,
// without backoff sleeps", DESIGN.md), unlike every retry library here.
// The evidence is the call's own decision, reported per attempt by the
// Observer: the attempt that met the close is resent by RS20 as the
// automatic resend, not as a configured retry, with no delay; the second
// delivers; the server counts two copies. (How long a loopback resend
// takes is a benchmark's business, not this test's.)
func TestReplaysafeResendsAtOnce(t *testing.T) {
	t.Parallel()
	sc := scenarioByID(t, "put-crossing")
	for i := range 5 {
		var (
			mu       sync.Mutex
			attempts []replaysafe.AttemptReport
		)
		observed := HTTPClient("replaysafe (observed)", func() *http.Client {
			return &http.Client{Transport: replaysafe.New(replaysafe.Options{Observer: replaysafe.Observer{
				OnAttempt: func(a replaysafe.AttemptReport) {
					if a.Request.URL.Path == targetPath {
						mu.Lock()
						attempts = append(attempts, a)
						mu.Unlock()
					}
				},
			}})}
		})
		r, err := runOnce(context.Background(), sc, observed, callTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if r.copies != 2 || r.outcome != "200" {
			t.Fatalf("run %d: put-crossing: %d copies, %s; want 2 copies, 200", i, r.copies, r.outcome)
		}
		mu.Lock()
		got := slices.Clone(attempts)
		mu.Unlock()
		atOnce := fsm.CallDecision{Action: fsm.ActionResend, Rule: fsm.RuleAmbiguousIdempotentResend}
		if len(got) != 2 || got[0].Number != 1 || got[0].Call != atOnce || got[1].Number != 2 || got[1].Call.Action != fsm.ActionDeliver {
			var calls []string
			for _, a := range got {
				calls = append(calls, fmt.Sprintf("attempt %d: %v", a.Number, a.Call))
			}
			t.Fatalf("run %d: attempts %q; want attempt 1 resent at once (%v), attempt 2 delivered", i, calls, atOnce)
		}
	}
}

// BenchmarkReplaysafeResend measures what TestReplaysafeResendsAtOnce
// does not judge: how long the PUT that crosses a close takes, its
// automatic resend included (call-ms: the mean call; each op is a whole
// run with a fresh server, warm-up and all).
func BenchmarkReplaysafeResend(b *testing.B) {
	sc := scenarioByID(b, "put-crossing")
	var calls time.Duration
	for b.Loop() {
		r, err := runOnce(context.Background(), sc, Replaysafe(), callTimeout)
		if err != nil || r.copies != 2 || r.outcome != "200" {
			b.Fatalf("put-crossing: %d copies, %s, %v", r.copies, r.outcome, err)
		}
		calls += r.duration
	}
	b.ReportMetric(float64(calls.Microseconds())/1000/float64(b.N), "call-ms")
}

// TestLoadWindow runs the multiplied-load row with the full LoadWindow
// for retryablehttp: DefaultBackoff's waits of 1, 2 and 4 s put its
// attempts at 0, 1, 3 and 7 s; the fifth would go at 15 s, so the call
// ends at the 10 s deadline, inside the 8 s wait, after 4 copies.
func TestLoadWindow(t *testing.T) {
	t.Parallel()
	r, err := runOnce(context.Background(), scenarioByID(t, "get-fail-all"), RetryableHTTP(), LoadWindow)
	if err != nil {
		t.Fatal(err)
	}
	if r.copies != 4 || r.outcome != "error deadline" || !r.same {
		t.Fatalf("get-fail-all over %v: %d copies (identical %v), %s; want 4 identical copies, error deadline",
			LoadWindow, r.copies, r.same, r.outcome)
	}
	// The deadline is set before the call's clock starts, so the call may
	// be measured a hair short of the window; an early end is seconds off.
	if r.duration < LoadWindow-time.Second {
		t.Fatalf("call ended after %v, before the window", r.duration)
	}
}

func scenarioByID(t testing.TB, id string) scenario {
	t.Helper()
	for _, sc := range scenarios {
		if sc.id == id {
			return sc
		}
	}
	t.Fatalf("no scenario %q", id)
	return scenario{}
}

// TestScenarios checks the table: ids unique, every warm scenario on a
// reused connection, every body scenario with a body.
func TestScenarios(t *testing.T) {
	seen := map[string]bool{}
	loads := 0
	for _, sc := range scenarios {
		if seen[sc.id] {
			t.Errorf("scenario %q twice", sc.id)
		}
		seen[sc.id] = true
		if sc.load {
			loads++
		}
		if (sc.body == BodyNone) != (sc.method == http.MethodGet) {
			t.Errorf("%s: %s with body %s", sc.id, sc.method, sc.body)
		}
	}
	if loads != 1 {
		t.Errorf("%d load scenarios, want 1", loads)
	}
}

// TestOneShotCannotRewind: the one-shot body is a reader no client can
// rewind, measure or recognise as in memory, as a streaming upload.
func TestOneShotCannotRewind(t *testing.T) {
	r := bodyReader(Request{Body: BodyOneShot, Payload: payload})
	if _, ok := r.(io.Seeker); ok {
		t.Error("one-shot body is an io.Seeker")
	}
	if _, ok := r.(interface{ Len() int }); ok {
		t.Error("one-shot body has Len (retryablehttp's LenReader)")
	}
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", r)
	if err != nil {
		t.Fatal(err)
	}
	if req.GetBody != nil || req.ContentLength != 0 {
		t.Errorf("net/http sees GetBody %v, ContentLength %d; want none, unknown", req.GetBody != nil, req.ContentLength)
	}
	got, _ := io.ReadAll(r)
	if !bytes.Equal(got, payload) {
		t.Errorf("body %q, want %q", got, payload)
	}
	if n, err := r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("read after the end: %d, %v; want 0, EOF", n, err)
	}
	if bodyReader(Request{Body: BodyNone, Payload: payload}) != nil {
		t.Error("BodyNone gives a reader")
	}
}

// TestHTTPClient: a client added through HTTPClient gets a fresh
// *http.Client per instance and sends the request's header fields.
func TestHTTPClient(t *testing.T) {
	made := 0
	var seen http.Header
	c := HTTPClient("custom", func() *http.Client {
		made++
		return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			seen = r.Header
			return &http.Response{StatusCode: http.StatusTeapot, Body: io.NopCloser(strings.NewReader("short"))}, nil
		})}
	})
	s := c.New()
	defer s.Close()
	out := s.Send(context.Background(), Request{Method: http.MethodGet, URL: "http://127.0.0.1/", Header: http.Header{"Idempotency-Key": {"k1"}}})
	if c.Name != "custom" || made != 1 || out.Status != http.StatusTeapot || out.Err != nil {
		t.Fatalf("name %q, made %d, outcome %+v", c.Name, made, out)
	}
	if seen.Get("Idempotency-Key") != "k1" {
		t.Errorf("header %v, want Idempotency-Key k1", seen)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestOutcomeClass(t *testing.T) {
	for _, tc := range []struct {
		o    Outcome
		want string
	}{
		{Outcome{Status: 200}, "200"},
		{Outcome{Status: 503}, "503"},
		{Outcome{Err: fmt.Errorf("post: %w", io.EOF)}, "error eof"},
		{Outcome{Err: io.ErrUnexpectedEOF}, "error eof"},
		{Outcome{Err: fmt.Errorf("read: %w", syscall.ECONNRESET)}, "error reset"},
		{Outcome{Err: context.DeadlineExceeded}, "error deadline"},
		{Outcome{Err: context.Canceled}, "error canceled"},
		{Outcome{Err: errors.New("giving up after 5 attempt(s)")}, "error other"},
		{Outcome{Err: &replaysafe.Error{Rule: fsm.RuleAmbiguousNotIdempotent, Attempts: 1, Err: io.EOF}}, "error RS18 eof"},
	} {
		if got := OutcomeClass(tc.o); got != tc.want {
			t.Errorf("OutcomeClass(%v) = %q, want %q", tc.o.Err, got, tc.want)
		}
	}
}

func TestRunOptions(t *testing.T) {
	for _, runs := range []int{-1, maxRuns + 1} {
		if _, err := Run(context.Background(), Options{Runs: runs}); err == nil {
			t.Errorf("Runs %d: no error", runs)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Options{Quick: true}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v, want context.Canceled", err)
	}
}

// sampleRows are two clients on two scenarios, for the printers.
var sampleRows = []Row{
	{Scenario: "post-crossing", Letter: "a", Title: "POST, close crosses it", Client: "one", Runs: 30,
		MinCopies: 1, MaxCopies: 1, TotalCopies: 30, SideEffect: true,
		Outcomes: []Tally{{"error eof", 30}}, Fastest: time.Millisecond, Slowest: 2 * time.Millisecond},
	{Scenario: "post-crossing", Letter: "a", Title: "POST, close crosses it", Client: "two", Runs: 30,
		MinCopies: 1, MaxCopies: 2, TotalCopies: 58, SideEffect: true, Duplicated: 28, Identical: 27, Altered: 1,
		Outcomes: []Tally{{"200", 28}, {"error eof", 2}}, Fastest: time.Millisecond, Slowest: 1012345 * time.Microsecond},
	{Scenario: "put-crossing", Letter: "c", Title: "PUT, close crosses it", Client: "one", Runs: 30,
		MinCopies: 2, MaxCopies: 2, TotalCopies: 60, Duplicated: 30, Identical: 30,
		Outcomes: []Tally{{"200", 30}}, Fastest: 2 * time.Millisecond, Slowest: 3 * time.Millisecond},
	{Scenario: "put-crossing", Letter: "c", Title: "PUT, close crosses it", Client: "two", Runs: 30,
		MinCopies: 1, MaxCopies: 1, TotalCopies: 30,
		Outcomes: []Tally{{"503", 30}}, Fastest: 2 * time.Millisecond, Slowest: 4 * time.Millisecond},
}

func TestPrint(t *testing.T) {
	var b strings.Builder
	if err := Print(&b, sampleRows); err != nil {
		t.Fatal(err)
	}
	want := `scenario           client  runs  copies min/max/total  dup POST  copies identical  altered body  outcome                call min/max
post-crossing (a)  one     30    1/1/30                0/30      -                 0             error eof              1ms/2ms
post-crossing (a)  two     30    1/2/58                28/30     27/28             1             200 ×28, error eof ×2  1ms/1.012s
put-crossing (c)   one     30    2/2/60                -         30/30             0             200                    2ms/3ms
put-crossing (c)   two     30    1/1/30                -         -                 0             503                    2ms/4ms
`
	if got := b.String(); got != want {
		t.Errorf("Print:\n%s\nwant:\n%s", got, want)
	}
}

func TestMarkdown(t *testing.T) {
	var b strings.Builder
	if err := Markdown(&b, sampleRows); err != nil {
		t.Fatal(err)
	}
	want := `| scenario | one | two |
|---|---|---|
| (a) POST, close crosses it | 1 · error eof | 1–2 · 200 ×28, error eof ×2 · **dup 28/30** · **altered body 1/30** |
| (c) PUT, close crosses it | 2 · 200 | 1 · 503 |
`
	if got := b.String(); got != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", got, want)
	}
}
