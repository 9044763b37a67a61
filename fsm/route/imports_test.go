package route

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStandardLibraryOnly enforces the layer rule of DESIGN.md: fsm and
// its sub-packages import the standard library only, and nothing that
// reads a clock, starts work or touches the outside world.
func TestStandardLibraryOnly(t *testing.T) {
	forbidden := map[string]bool{
		"os": true, "net": true, "net/http": true, "io/ioutil": true,
		"math/rand": true, "math/rand/v2": true, "crypto/rand": true,
		"syscall": true, "unsafe": true, "os/exec": true, "sync": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && path != "github.com/replaysafe/replaysafe/fsm" {
				t.Errorf("%s imports %q: fsm/route may import the standard library and fsm only", name, path)
			}
			if forbidden[path] {
				t.Errorf("%s imports %q: fsm/route does no I/O, reads no clock and starts no goroutine", name, path)
			}
		}
		if strings.Contains(string(src), "time.Now") || strings.Contains(string(src), "go func") {
			t.Errorf("%s reads the clock or starts a goroutine", name)
		}
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}
