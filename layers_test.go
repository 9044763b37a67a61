package replaysafe_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/replaysafe/replaysafe"

// layer is a rule of the layout (../shared/DESIGN.md, "Layout"): a
// package under one of prefixes may import, of this module, only the
// packages under allowed.
type layer struct {
	name     string
	prefixes []string
	allowed  []string
}

// layers is the design card's table. A package matches the first layer
// whose prefix it has; "" is the root package alone.
var layers = []layer{
	{"fsm (pure)", []string{"fsm"}, []string{"fsm"}},
	{"transports", []string{"transports"}, []string{"transports", "fsm/route"}},
	{"adapters", []string{"adapters"}, []string{"adapters", "fsm", "transports/h2"}},
	{"test kit", []string{"replaysafetest"}, []string{"replaysafetest", "internal/selfsigned"}},
	{"internal library", []string{"internal/driver", "internal/pool", "internal/dial", "internal/altsvc"},
		[]string{"internal/driver", "internal/pool", "internal/dial", "internal/altsvc", "fsm", "adapters", "transports"}},
	{"forward", []string{"forward"}, []string{"", "fsm"}},
	{"root", []string{""}, []string{"fsm", "adapters", "transports", "internal/driver", "internal/pool", "internal/dial", "internal/altsvc"}},
}

// under reports whether package p (module-relative, "" for the root) is
// prefix or below it.
func under(p, prefix string) bool {
	if prefix == "" {
		return p == ""
	}
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// TestLayers: every library package imports only the layers below it,
// as the design card's table says: the face never imports the forwarder
// or a harness, the forwarder only the face and fsm, transports never the
// adapters, fsm nothing of the module but fsm; and no library package
// imports a harness (internal/harness), a command or a test package.
func TestLayers(t *testing.T) {
	imports := map[string]map[string]bool{} // package → module packages it imports
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if base := d.Name(); p != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "tools" || base == "otel") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(p))
		if pkg == "." {
			pkg = ""
		}
		if imports[pkg] == nil {
			imports[pkg] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			q, _ := strconv.Unquote(imp.Path.Value)
			if q == module {
				imports[pkg][""] = true
			} else if rel, ok := strings.CutPrefix(q, module+"/"); ok {
				imports[pkg][rel] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]int{}
	for pkg, deps := range imports {
		var l *layer
		for i := range layers {
			for _, prefix := range layers[i].prefixes {
				if under(pkg, prefix) && l == nil {
					l = &layers[i]
				}
			}
		}
		if l == nil {
			continue // commands, harnesses, fuzz targets, the model, generators: not library code
		}
		checked[l.name]++
		for dep := range deps {
			ok := false
			for _, a := range l.allowed {
				ok = ok || under(dep, a)
			}
			if !ok {
				t.Errorf("%s (%s) imports %s", path.Join(module, pkg), l.name, path.Join(module, dep))
			}
		}
	}
	for _, l := range layers {
		if checked[l.name] == 0 {
			t.Errorf("no package of layer %s found", l.name)
		}
	}
}

// TestNoXNetHTTP2Transport: no library file uses x/net's HTTP/2 Transport
// or ClientConn (on Go 1.27 they wrap net/http and lose the GOAWAY
// evidence, issue 32); HTTP/2 runs on transports/h2, which takes only
// x/net's Framer, frame types and hpack. Harnesses may still measure
// x/net as a peer.
func TestNoXNetHTTP2Transport(t *testing.T) {
	banned := []string{"Transport", "ClientConn", "ConfigureTransport", "ConfigureTransports"}
	files := 0
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			base := d.Name()
			if p != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "tools" || base == "otel" || base == "cmd" || base == "fuzz" || base == "model_test" || p == filepath.Join("internal", "harness")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		files++
		var local string // the name x/net/http2 is imported as
		for _, imp := range f.Imports {
			if q, _ := strconv.Unquote(imp.Path.Value); q == "golang.org/x/net/http2" {
				local = "http2"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && slices.Contains(banned, sel.Sel.Name) {
				t.Errorf("%s: uses x/net's http2.%s", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("scanned %d library files; the walk missed the tree", files)
	}
}

// TestFaceStaysThin: the root package is the face (../shared/DESIGN.md,
// "Layout"): at most 15 source files and 2,500 lines, at most 45 exported
// names, each with a doc comment (on itself or on its group).
func TestFaceStaysThin(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var parsed []*ast.File
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, n, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			parsed = append(parsed, f)
		}
	}
	files, lines := 0, 0
	var names, undocumented []string
	for _, f := range parsed {
		{
			files++
			lines += fset.Position(f.End()).Line
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil && d.Name.IsExported() {
						names = append(names, d.Name.Name)
						if d.Doc == nil {
							undocumented = append(undocumented, d.Name.Name)
						}
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						var ids []*ast.Ident
						var doc *ast.CommentGroup
						switch s := s.(type) {
						case *ast.TypeSpec:
							ids, doc = []*ast.Ident{s.Name}, s.Doc
						case *ast.ValueSpec:
							ids, doc = s.Names, s.Doc
						}
						for _, id := range ids {
							if !id.IsExported() {
								continue
							}
							names = append(names, id.Name)
							if doc == nil && d.Doc == nil {
								undocumented = append(undocumented, id.Name)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("root: %d source files, %d lines, %d exported names", files, lines, len(names))
	if files > 15 || lines > 2500 {
		t.Errorf("the root package has %d source files and %d lines, want at most 15 and 2,500", files, lines)
	}
	if len(names) > 45 {
		slices.Sort(names)
		t.Errorf("the root package exports %d names, want at most 45: %v", len(names), names)
	}
	if len(undocumented) > 0 {
		t.Errorf("exported names without a doc comment: %v", undocumented)
	}
}
