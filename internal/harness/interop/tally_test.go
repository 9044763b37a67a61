package interop

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The tally counts deliveries, errors and copies per request id, and the
// safety bounds catch a third copy and a second POST.
func TestResultTallies(t *testing.T) {
	runs := []run{
		{wall: 2 * time.Millisecond, requests: []request{
			{id: "a", method: http.MethodGet, status: 200, protoMajor: 3},
			{id: "b", method: http.MethodPost, err: errors.New("broken pipe")},
		}},
		{wall: 4 * time.Millisecond, requests: []request{
			{id: "c", method: http.MethodPut, status: 200},
			{id: "d", method: http.MethodPost, status: 503},
		}},
	}
	r := result("row", Replaysafe, runs, map[string]int{"a": 1, "c": 2, "d": 1}, 3)
	want := Result{Row: "row", Client: Replaysafe, Runs: 2, Requests: 4, Delivered: 2, Errors: 2,
		Copies: 4, MaxCopies: 2, Lost: 1, Conns: 3, H3: 1, Wall: 3 * time.Millisecond, FirstErr: "broken pipe"}
	if r != want {
		t.Fatalf("tally\n got %+v\nwant %+v", r, want)
	}
	if u := r.Unsafe(); u != "" {
		t.Fatalf("two copies of a PUT judged unsafe: %s", u)
	}
	if u := result("row", NetHTTP, runs, map[string]int{"a": 3, "d": 2}, 0).Unsafe(); u != "a request was received 3 times; 1 POST requests were received twice" {
		t.Fatalf("unsafe = %q", u)
	}
}

// Request ids come out of both access log formats; requests without one
// are not counted.
func TestAccessLogIDs(t *testing.T) {
	dir := t.TempDir()
	nginx := filepath.Join(dir, "nginx.log")
	if err := os.WriteFile(nginx, []byte("r.1.0 GET 200 HTTP/2.0 7\n- GET 200 HTTP/1.1 8\nr.1.0 POST 200 HTTP/2.0 9\nr.2.1 PUT 200 HTTP/1.1 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	caddy := filepath.Join(dir, "caddy.log")
	if err := os.WriteFile(caddy, []byte(`{"level":"info","request":{"proto":"HTTP/3.0","headers":{"X-Request-Id":["r.1.0"]}}}`+"\n"+
		`{"level":"info","request":{"proto":"HTTP/2.0","headers":{"User-Agent":["x"]}}}`+"\nnot json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		l    *logFile
		want map[string]int
	}{
		{&logFile{path: nginx, parse: nginxID}, map[string]int{"r.1.0": 2, "r.2.1": 1}},
		{&logFile{path: caddy, parse: caddyID}, map[string]int{"r.1.0": 1}},
		{&logFile{path: filepath.Join(dir, "absent.log"), parse: nginxID}, map[string]int{}},
	} {
		got, err := c.l.counts()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(c.want) {
			t.Fatalf("%s: %v, want %v", c.l.path, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Fatalf("%s: %v, want %v", c.l.path, got, c.want)
			}
		}
	}
}

// The idle-crossing offsets sweep from -spread to +spread over the runs.
func TestCrossingSweep(t *testing.T) {
	var waits []time.Duration
	for n := 0; n < 3; n++ {
		start := time.Now()
		e := &runEnv{t: &target{url: "http://127.0.0.1:1"}, c: &client{rt: failing{}}, n: n, of: 3, prefix: "x"}
		crossing(http.MethodGet, 20*time.Millisecond, 10*time.Millisecond)(t.Context(), e)
		waits = append(waits, time.Since(start))
	}
	if waits[0] < 10*time.Millisecond || waits[2] < 30*time.Millisecond || waits[0] >= waits[2] {
		t.Fatalf("waits %v: want about 10ms, 20ms, 30ms", waits)
	}
}

type failing struct{}

func (failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, errors.New("no server") }

// Bad flags exit 2 before any server starts.
func TestMainFlags(t *testing.T) {
	for _, args := range [][]string{{"-runs", "0"}, {"-case", "("}, {"-server", "apache"}, {"extra", "-nope"}} {
		var out, errOut strings.Builder
		if code := Main(args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
}
