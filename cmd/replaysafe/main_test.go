package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/harness/conformance"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRulesListsEveryRule(t *testing.T) {
	code, out, _ := runCmd(t, "rules")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for i := range fsm.RuleCount {
		r := fsm.Rule(i)
		if !strings.Contains(out, r.ID()+"  ") || !strings.Contains(out, r.String()) {
			t.Errorf("rules output lacks %s %s", r.ID(), r)
		}
	}
}

func TestRulesJSON(t *testing.T) {
	code, out, _ := runCmd(t, "rules", "-json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var rules []struct{ ID, Slug, Action string }
	if err := json.Unmarshal([]byte(out), &rules); err != nil {
		t.Fatal(err)
	}
	if len(rules) != fsm.RuleCount {
		t.Fatalf("%d rules in JSON, want %d", len(rules), fsm.RuleCount)
	}
	found := false
	for _, r := range rules {
		if r.ID == "RS20" {
			found = r.Slug == "ambiguous-idempotent-resend" && r.Action == "resend"
		}
	}
	if !found {
		t.Fatalf("RS20 missing or wrong in JSON rules: %+v", rules)
	}
}

func TestExplainPrintsDecisionAndRule(t *testing.T) {
	code, out, _ := runCmd(t, "explain", filepath.Join("..", "..", "spec", "examples", "evidence-refused-stream.trace"))
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"@2ms refused-stream", "resend   RS13 evidence-refused-stream",
		"decision: resend by RS13 evidence-refused-stream (connection: discard)",
		"decision: fail by RS18 ambiguous-not-idempotent",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
}

func TestExplainFailsOnBrokenExpectation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wrong.trace")
	src := "request method=POST body=buffered\n@0s conn-acquired reused h1\n@1ms first-byte-written\n@2ms closed\nexpect resend ambiguous-idempotent-resend\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCmd(t, "explain", path)
	if code != 1 || !strings.Contains(out, "MISMATCH") || !strings.Contains(out, "ambiguous-not-idempotent") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	// The MISMATCH under the step and the failure name the same line:
	// the expect line, 5.
	if !strings.Contains(out, "MISMATCH: trace line 5 says") || !strings.Contains(out, "expectation failed: trace line 5: ") ||
		regexp.MustCompile(`line [0-46-9]`).MatchString(out) {
		t.Errorf("explain names another line than the expect line 5:\n%s", out)
	}
}

func TestExplainReportsSyntaxErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.trace")
	if err := os.WriteFile(path, []byte("request method=GET\n@0s warp-drive\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCmd(t, "explain", path)
	if code != 1 || !strings.Contains(errOut, "line 2") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestUnknownCommand(t *testing.T) {
	code, _, errOut := runCmd(t, "frobnicate")
	if code != 2 || !strings.Contains(errOut, "unknown command") || !strings.Contains(errOut, "explain") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestBenchReadsSavedRun(t *testing.T) {
	code, out, errOut := runCmd(t, "bench", "-in", filepath.Join("..", "..", "internal", "harness", "bench", "testdata", "sample.txt"))
	if code != 0 || !strings.Contains(out, "RoundTrip/h1/GET/c1") || !strings.Contains(out, "x-net-http2") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestConformanceRealFlag: -real is the command's own flag, taken out
// before the loopback suite parses its flags; an unknown case pattern
// still fails as a usage error, before any real server starts.
func TestConformanceRealFlag(t *testing.T) {
	code, _, errOut := runCmd(t, "conformance", "-real", "-quick", "-case", "^no-such-case$")
	if code != 2 || !strings.Contains(errOut, "no case matches") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// TestEveryCommandHelp runs each command with -h: it exits 0, prints its
// usage and exactly the flags listed here to stderr, and runs nothing
// (nothing on stdout, no progress, no listener).
func TestEveryCommandHelp(t *testing.T) {
	want := map[string][]string{
		"rules":       {"-json", "-sources", "-v"},
		"explain":     nil,
		"conformance": {"-case", "-json", "-quick", "-real", "-runs", "-server"},
		"fuzz":        {"-dir", "-parallel", "-per-target", "-target", "-time"},
		"bench":       {"-benchtime", "-count", "-filter", "-in", "-interleave", "-json", "-o", "-svg"},
		"soak":        {"-c", "-conn-life", "-faultfree", "-faults", "-maxconns", "-model", "-n", "-peer", "-proto", "-restarts", "-retry", "-retry-after-max", "-seed", "-timeout"},
		"forward": {"-acquire-timeout", "-egress", "-forwarded", "-h2c", "-h3", "-listen", "-metrics", "-preserve-host",
			"-shutdown-timeout", "-tls-cert", "-tls-key", "-to", "-trust-forwarded", "-x-forwarded-for"},
	}
	flagLine := regexp.MustCompile(`(?m)^  (-[a-z0-9-]+)`)
	// What the commands print on stderr once they run: conformance's and
	// fuzz's first lines, forward's listener, go test's result lines.
	ranSomething := regexp.MustCompile(`conformance: \d+ cases|fuzzing \d+ target|listening on \w+://|(?m)^(ok|FAIL|PASS)\b`)
	seen := map[string]bool{}
	for _, c := range commands() {
		seen[c.name] = true
		flags, ok := want[c.name]
		if !ok {
			t.Errorf("command %s: no flag list in this test", c.name)
			continue
		}
		code, out, errOut := runCmd(t, c.name, "-h")
		if code != 0 || out != "" || !strings.HasPrefix(errOut, "usage: replaysafe "+c.name) {
			t.Errorf("%s -h: exit %d, stdout %q, stderr:\n%s", c.name, code, out, errOut)
			continue
		}
		var got []string
		for _, m := range flagLine.FindAllStringSubmatch(errOut, -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, flags) {
			t.Errorf("%s -h lists flags %q, want %q:\n%s", c.name, got, flags, errOut)
		}
		if m := ranSomething.FindString(errOut); m != "" {
			t.Errorf("%s -h ran something (%q):\n%s", c.name, m, errOut)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("%s is in this test's list but is no command", name)
		}
	}
}

// TestConformanceJSON: conformance -json writes one JSON document, the
// scenario reports and (without -case) the retry rows in it, and nothing
// else on stdout.
func TestConformanceJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick conformance suite and the retry rows")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	code, out, errOut := runCmd(t, "conformance", "-quick", "-json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	tool := exec.Command(python, "-m", "json.tool")
	tool.Stdin = strings.NewReader(out)
	if b, err := tool.CombinedOutput(); err != nil {
		t.Fatalf("python3 -m json.tool: %v\n%s", err, b)
	}
	var doc struct {
		Scenarios []struct{ Case, Client string }
		Retries   []struct{ Scenario, Client string }
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if dec.More() {
		t.Fatal("more than one JSON value on stdout")
	}
	cases := map[string]bool{}
	for _, r := range doc.Scenarios {
		cases[r.Case] = true
	}
	scenarios, err := conformance.Scenarios()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(conformance.Cases(scenarios)); len(cases) != n {
		t.Errorf("%d cases in the JSON, want %d", len(cases), n)
	}
	if len(doc.Retries) == 0 || !slices.ContainsFunc(doc.Retries, func(r struct{ Scenario, Client string }) bool {
		return r.Scenario == "post-crossing" && strings.HasPrefix(r.Client, "replaysafe")
	}) {
		t.Errorf("the retry rows are missing: %+v", doc.Retries)
	}
}
