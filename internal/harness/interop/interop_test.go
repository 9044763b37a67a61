package interop

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var (
	full     = flag.Bool("interop.full", false, "run every row FullRuns times (the tables of docs/interop.md)")
	match    = flag.String("interop.run", "", "run only the rows whose ID matches this regular expression")
	markdown = flag.String("interop.markdown", "", "write each server's results as docs/interop.md's Markdown table to DIR/SERVER.md")
)

// Each server's rows in the quick mode: the safety bounds (no request
// received more than twice, no POST twice), replaysafe's deliveries where
// it must deliver, and every replaysafe attempt trace clean under
// tracecheck. Required in CI; skipped with one line where the server is
// missing.
func TestRealServers(t *testing.T) {
	for _, server := range Servers {
		t.Run(server, func(t *testing.T) {
			if _, err := Binary(server); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%v (CI=true requires it: .ci/setup installs it)", err)
				}
				t.Skipf("%s is not installed; install it (.ci/setup) to run its real-server rows", server)
			}
			cfg := Config{Quick: !*full, Servers: []string{server}, Dir: t.TempDir()}
			if *match != "" {
				cfg.Match = regexp.MustCompile(*match)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			defer cancel()
			var out strings.Builder
			sum, err := Run(ctx, &out, cfg)
			t.Log("\n" + out.String())
			if *markdown != "" {
				var md strings.Builder
				WriteMarkdown(&md, sum, commit(t))
				if werr := os.WriteFile(filepath.Join(*markdown, server+".md"), []byte(md.String()), 0o644); werr != nil {
					t.Error(werr)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(sum.Results) == 0 && *match != "" {
				t.Skipf("no %s row matches %q", server, *match)
			}
			if len(sum.Results) == 0 || sum.Traces == 0 {
				t.Fatalf("%d results, %d traces checked", len(sum.Results), sum.Traces)
			}
			for _, r := range sum.Results {
				if r.Copies == 0 {
					t.Errorf("%s %s: the server received nothing", r.Row, r.Client)
				}
			}
		})
	}
}

// commit names the tree the tests run in: git's short commit, marked
// "+changes" when the working tree differs from it.
func commit(t *testing.T) string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		t.Logf("git rev-parse: %v", err)
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err != nil || len(st) > 0 {
		c += "+changes"
	}
	return c
}
