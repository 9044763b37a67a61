package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/fsm"
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
