//go:build !libfuzzer

package fuzz

import (
	"testing"

	modeltest "github.com/replaysafe/replaysafe/model_test"
	"pgregory.net/rapid"
)

var callProperty = rapid.MakeFuzz(modeltest.CallProperty)

// FuzzCallModel runs model_test's call property (modeltest.CallProperty:
// a random policy and request, outcomes the attempt rules can produce,
// fsm.Call compared with the call model and the invariants that no
// policy makes a copy the rules forbid) on the fuzzer's bytes.
func FuzzCallModel(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { callProperty(t, data) })
}

func init() {
	corpora = append(corpora, corpus{target: "FuzzCallModel", typ: "[]byte", seeds: machineModelSeeds})
}
