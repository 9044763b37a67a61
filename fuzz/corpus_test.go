package fuzz

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated seed corpora under testdata/fuzz")

// generatedPrefix marks the seed files this test writes; any other file in
// a corpus directory (a crasher go test -fuzz saved, a hand-written seed)
// is left alone.
const generatedPrefix = "seed-"

// TestSeedCorpora checks that the committed seed corpora under
// testdata/fuzz are what the generators make (run go test ./fuzz/ -update
// to rewrite them). go test ./fuzz/ itself runs every seed through its
// target.
func TestSeedCorpora(t *testing.T) {
	if len(corpora) == 0 {
		t.Fatal("no corpus registered")
	}
	for _, c := range corpora {
		if c.seeds == nil {
			continue // only f.Add seeds
		}
		t.Run(c.target, func(t *testing.T) {
			seeds, err := c.seeds()
			if err != nil {
				t.Fatal(err)
			}
			if len(seeds) == 0 {
				t.Fatal("no seeds")
			}
			dir := filepath.Join("testdata", "fuzz", c.target)
			want := map[string]string{}
			for name, v := range seeds {
				// QuoteToASCII, not %q: %q leaves the runes it finds
				// printable as they are, and which those are changes
				// with the Unicode tables of each Go release.
				want[generatedPrefix+name] = fmt.Sprintf("go test fuzz v1\n%s(%s)\n", c.typ, strconv.QuoteToASCII(v))
			}
			if *update {
				writeCorpus(t, dir, want)
			}
			have := map[string]bool{}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), generatedPrefix) {
					have[e.Name()] = true
				}
			}
			names := make([]string, 0, len(want))
			for name := range want {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				b, err := os.ReadFile(filepath.Join(dir, name))
				switch {
				case err != nil:
					t.Errorf("%v: run go test ./fuzz/ -update", err)
				case string(b) != want[name]:
					t.Errorf("%s is stale: run go test ./fuzz/ -update", filepath.Join(dir, name))
				}
				delete(have, name)
			}
			for name := range have {
				t.Errorf("%s is no longer generated: run go test ./fuzz/ -update", filepath.Join(dir, name))
			}
			t.Logf("%d generated seeds in %s", len(want), dir)
		})
	}
}

func writeCorpus(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if _, ok := want[e.Name()]; strings.HasPrefix(e.Name(), generatedPrefix) && !ok {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, content := range want {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
