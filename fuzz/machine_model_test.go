package fuzz

import "testing"

// FuzzMachineModel runs model_test's rapid state-machine property
// (modeltest.Property: named actions in valid and invalid orders, fsm
// compared with the model and the invariants after every action) on the
// fuzzer's bytes, through rapid.MakeFuzz. An input that runs out of bytes
// before the actions end is skipped.
func FuzzMachineModel(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { runModelProperty(t, data) })
}

func init() {
	corpora = append(corpora, corpus{target: "FuzzMachineModel", typ: "[]byte", seeds: machineModelSeeds})
}
