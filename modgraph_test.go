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
