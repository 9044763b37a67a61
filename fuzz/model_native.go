//go:build !libfuzzer

package fuzz

import (
	"testing"

	modeltest "github.com/replaysafe/replaysafe/model_test"
	"pgregory.net/rapid"
)

var (
	rapidProperty     = rapid.MakeFuzz(modeltest.Property)
	rapidCallProperty = rapid.MakeFuzz(modeltest.CallProperty)
)

// runModelProperty runs the rapid state-machine property of model_test on
// fuzz input, through rapid.MakeFuzz, which needs the standard library's
// *testing.T. t is typed any because under OSS-Fuzz's libFuzzer build the
// target's *testing.T is go-118-fuzz-build's own type; see
// model_libfuzzer.go.
func runModelProperty(t any, data []byte) {
	rapidProperty(t.(*testing.T), data)
}

// runCallProperty runs model_test's call property on fuzz input, as
// runModelProperty does the machine's, and the hedging model's check on
// the same bytes read as a hedged call (CheckHedgedBytes).
func runCallProperty(t any, data []byte) {
	tt := t.(*testing.T)
	if err := CheckHedgedBytes(data); err != nil {
		tt.Fatal(err)
	}
	rapidCallProperty(tt, data)
}
