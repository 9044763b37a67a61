package conformance

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func runMain(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestMainTable(t *testing.T) {
	code, out, errs := runMain("-runs", "2", "-case", `^(get-crossing|resend-off)/tcp$`)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "  net") || !strings.Contains(lines[0], "copies") || !strings.Contains(lines[0], "outcome") {
		t.Errorf("header %q", lines[0])
	}
	for _, want := range []string{
		"GET, close crosses the request (get-crossing)\n  tcp  replaysafe  200 2/2",
		"  tcp  net/http    200 2/2",
		"RS20,RS02",
		"error 2/2",
		"RS09",
		"n/a",
		"2 cases, 2 runs each; replaysafe met its expectation in 2/2.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if len(lines) != 1+2+4+4 {
		t.Errorf("%d lines, want 11:\n%s", len(lines), out)
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
	if rs.Client != Replaysafe || rs.Case != "post-crossing/tls" || rs.Runs != 1 || !rs.OK ||
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
		{[]string{"-runs", "0"}, 2, "-runs must be"},
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
	r := Report{Runs: 3, Copies: []int{1, 2, 2}, Outcomes: []Count{{"200", 2}, {"error", 1}}, Rules: []Count{{"RS20,RS02", 3}}}
	if got := r.CopiesCell(); got != "1-2" {
		t.Errorf("CopiesCell %q", got)
	}
	if got := r.OutcomeCell(); got != "200 2/3, error 1/3" {
		t.Errorf("OutcomeCell %q", got)
	}
	if got := r.RulesCell(); got != "RS20,RS02" {
		t.Errorf("RulesCell %q", got)
	}
	var buf bytes.Buffer
	PrintTable(&buf, []Report{{Title: "t", Case: "t/tcp", Network: "tcp", Client: Replaysafe, Runs: 1, Copies: []int{3}, Outcomes: []Count{{"200", 1}}, Want: Want{200, "RS02", 1}}})
	if !strings.Contains(buf.String(), "UNEXPECTED: want 200, 1 copies, RS02") || !strings.Contains(buf.String(), "met its expectation in 0/1") {
		t.Errorf("table:\n%s", buf.String())
	}
}
