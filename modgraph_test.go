package replaysafe_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNoOpenTelemetryInModuleGraph: OpenTelemetry belongs to the otel
// module (otel/go.mod); the library's own module never requires it, and
// `go list ./...` at the root does not descend into otel/.
func TestNoOpenTelemetryInModuleGraph(t *testing.T) {
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, "go.opentelemetry.io") || strings.Contains(line, "github.com/prometheus/") {
				t.Errorf("%s: %s", f, strings.TrimSpace(line))
			}
		}
	}
	if testing.Short() {
		return
	}
	out, err := exec.Command("go", "list", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "github.com/replaysafe/replaysafe/otel") {
			t.Errorf("go list ./... at the root lists %s", strings.TrimSpace(line))
		}
	}
}

// TestNoPeerInLibraryGraph: the peers the benchmarks and comparisons run
// beside (failsafe-go, resty, go-retryablehttp) are in no library
// package's import graph; only the harnesses and their tests import
// them.
func TestNoPeerInLibraryGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".", "./fsm/...", "./adapters/...", "./transports/...", "./forward/...", "./replaysafetest/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	listed := 0
	for line := range strings.Lines(string(out)) {
		for _, p := range []string{"github.com/failsafe-go/", "github.com/go-resty/", "github.com/hashicorp/go-retryablehttp"} {
			if strings.HasPrefix(line, p) {
				t.Errorf("a library package imports %s", strings.TrimSpace(line))
			}
		}
		listed++
	}
	if listed < 10 {
		t.Fatalf("go list -deps listed %d packages; the check read nothing", listed)
	}
}
