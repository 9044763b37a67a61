// Package fuzz holds replaysafe's native fuzz targets (go test -fuzz) and
// the helpers they share. The targets live in the _test.go files, one a
// file: each target's name appears in that file only, so that OSS-Fuzz's
// compile_native_go_fuzzer, which finds a target's file by grepping for
// its name, finds exactly one. docs/fuzzing.md lists the targets, their
// OSS-Fuzz build lines, and how to run campaigns (package internal/harness/campaign)
// and replay crashers.
//
// The committed seed corpora are under testdata/fuzz/<target>/; go test
// ./fuzz/ runs every seed, and go test ./fuzz/ -update regenerates the
// generated ones (named seed-*) from spec/examples.
package fuzz
