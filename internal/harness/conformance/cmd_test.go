package conformance

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func runMain(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestMainStreamsRows(t *testing.T) {
	code, out, errs := runMain("-runs", "2", "-case", `^(get-crossing|resend-off)/tcp$|^h2-post-refused/h2$|^h3-post-rejected/h3$|^proxy-407/tls$`)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, want := range []string{
		"== loopback scenarios\n  net ",
		"GET, close crosses the request (get-crossing/tcp)\n  tcp         replaysafe     200 2/2",
		"  tcp         net/http       200 2/2",
		"RS20,RS02",
		"RS09",
		"n/a",
		"RS13,RS02", XNetHTTP2, NetHTTPH2,
		"RS15,RS02", QuicGoHTTP3,
		"GET through a CONNECT proxy that answers 407 (proxy-407/tls)",
		"5 cases, 2 runs each, in ",
		"replaysafe met its expectation in 5/5",
		"attempt traces checked by tracecheck",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Every row, HTTP/1.1 and proxy rows included, has a slowest cell.
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && (f[0] == "tcp" || f[0] == "tls") && f[2] != "n/a" && !strings.HasSuffix(f[7], "s") {
			t.Errorf("row without a slowest cell: %q", line)
		}
	}
	if n := strings.Count(errs, "[case "); n != 5 || !strings.Contains(errs, "[case 5/5, ") {
		t.Errorf("%d progress lines:\n%s", n, errs)
	}
}

func TestMainJSON(t *testing.T) {
	code, out, errs := runMain("-json", "-runs", "1", "-case", `^post-crossing/tls$`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var reps []Report
	if err := json.Unmarshal([]byte(out), &reps); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(reps) != 2 {
		t.Fatalf("%d reports, want 2", len(reps))
	}
	rs, std := reps[0], reps[1]
	if rs.Client != Replaysafe || rs.Case != "post-crossing/tls" || rs.Runs != 1 || !rs.OK || rs.Traces != 2 ||
		len(rs.Copies) != 1 || rs.Copies[0] != 1 || rs.Outcomes[0] != (Count{"error", 1}) || rs.Rules[0] != (Count{"RS18", 1}) {
		t.Errorf("replaysafe report %+v", rs)
	}
	if std.Client != NetHTTP || !std.OK || std.Copies[0] != 1 || len(std.Rules) != 0 {
		t.Errorf("net/http report %+v", std)
	}
}

func TestMainFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"-runs", "-1"}, 2, "-runs must be"},
		{[]string{"-runs", "x"}, 2, "invalid value"},
		{[]string{"-case", "("}, 2, "-case"},
		{[]string{"-case", "no-such-case"}, 2, "no case matches"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"-nope"}, 2, "flag provided but not defined"},
		{[]string{"-h"}, 0, "usage: replaysafe conformance"},
	} {
		code, out, errs := runMain(tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.err) || out != "" {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want %d and %q", tc.args, code, errs, out, tc.code, tc.err)
		}
	}
}

func TestCells(t *testing.T) {
	r := Report{Runs: 3, Copies: []int{1, 2, 2}, Conns: []int{1, 1, 1}, Outcomes: []Count{{"200", 2}, {"error", 1}}, Rules: []Count{{"RS20,RS02", 3}}}
	if got := r.CopiesCell(); got != "1-2" {
		t.Errorf("CopiesCell %q", got)
	}
	if got := r.ConnsCell(); got != "1" {
		t.Errorf("ConnsCell %q", got)
	}
	if got := r.OutcomeCell(); got != "200 2/3, error 1/3" {
		t.Errorf("OutcomeCell %q", got)
	}
	if got := r.RulesCell(); got != "RS20,RS02" {
		t.Errorf("RulesCell %q", got)
	}
	bad := Report{Case: "t/tcp", Network: "tcp", Client: Replaysafe, Runs: 1, Copies: []int{3}, Outcomes: []Count{{"200", 1}}, Want: Want{200, "RS02", 1}}
	if got := strings.Join(Row(bad), " "); !strings.Contains(got, "UNEXPECTED: want 200, 1 copies, RS02") {
		t.Errorf("row %q", got)
	}
	bad.Trace = "tracecheck: 1 of 1 attempt traces failed"
	if got := strings.Join(Row(bad), " "); !strings.Contains(got, "TRACE FAILED") {
		t.Errorf("row %q", got)
	}
}

// A case still running is named on the progress writer every
// ProgressInterval with its client and run, so that a long case is not
// silence.
func TestMainProgressWithinACase(t *testing.T) {
	defer func(d time.Duration) { ProgressInterval = d }(ProgressInterval)
	ProgressInterval = time.Millisecond // the tunnel cut holds each run for 150ms
	code, out, errs := runMain("-quick", "-runs", "2", "-case", `^proxy-post-tunnel-cut/tls$`)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, want := range []string{
		"] proxy-post-tunnel-cut/tls: replaysafe run 1/2\n",
		"] proxy-post-tunnel-cut/tls: replaysafe run 2/2\n",
		"] proxy-post-tunnel-cut/tls: net/http run 1/",
	} {
		if !strings.Contains(errs, "[running, ") || !strings.Contains(errs, want) {
			t.Errorf("progress lacks %q:\n%s", want, errs)
		}
	}
}

// A µs value (two bytes, one character) fills its column as a ms value
// does: the next column starts at the same character.
func TestColumnsAlignWithMicroseconds(t *testing.T) {
	var b bytes.Buffer
	printLine(&b, []string{"tcp", "replaysafe", "200 3/3", "1", "1", "RS02", "512µs", "ok"})
	printLine(&b, []string{"tcp", "replaysafe", "200 3/3", "1", "1", "RS02", "1.5ms", "ok"})
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	col := func(line string) int { return utf8.RuneCountInString(line[:strings.LastIndex(line, "ok")]) }
	if len(lines) != 2 || col(lines[0]) != col(lines[1]) {
		t.Errorf("the check column starts at different characters:\n%s", b.String())
	}
}
