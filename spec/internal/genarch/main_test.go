package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageListed: every folder of the repository that holds a Go
// package (its own modules otel and tools included) has a row in the
// package table, and every row names a folder that exists, so the
// table cannot fall behind a package that moves or appears.
func TestEveryPackageListed(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	have := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			have[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(have) < 20 {
		t.Fatalf("found only %d package folders under %s: not the repository root?", len(have), root)
	}
	table := map[string]bool{}
	for _, n := range nodes {
		if n.pkg == "" {
			continue
		}
		dir := n.pkg
		if n.group == "root" {
			dir = "."
		}
		table[dir] = true
	}
	for _, l := range listed {
		table[l.pkg] = true
	}
	for dir := range have {
		if !table[dir] {
			t.Errorf("package folder %s has no row in docs/architecture.md's tables (spec/internal/genarch)", dir)
		}
	}
	for dir := range table {
		if _, err := os.Stat(filepath.Join(root, dir)); err != nil || !have[dir] {
			t.Errorf("the table names %s, which holds no package", dir)
		}
	}
}
