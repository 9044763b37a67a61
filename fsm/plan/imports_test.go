package plan

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPure: the plan is a function of its input. Its package imports
// errors, fsm (for its Proto) and fsm/route and nothing else: no clock
// (not even time), no I/O, no synchronisation.
func TestPure(t *testing.T) {
	allowed := map[string]bool{"errors": true, "strconv": true, "github.com/replaysafe/replaysafe/fsm": true, "github.com/replaysafe/replaysafe/fsm/route": true}
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		files++
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); !allowed[path] {
				t.Errorf("%s imports %q", name, path)
			}
		}
	}
	if files < 2 {
		t.Fatalf("checked %d files", files)
	}
}
