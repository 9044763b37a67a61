package fuzz

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"testing"
)

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

// machineModelSeedValues are PCG seeds whose 2 KiB of output is enough
// for rapid to finish a sequence of actions (it skips an input that runs
// out of bytes); short inputs keep the fuzzer's minimisation quick.
var machineModelSeedValues = []uint64{1, 2, 7, 9, 10, 12}

// machineModelSeeds are a few random inputs, from fixed seeds, long
// enough for rapid to run a whole sequence of actions.
func machineModelSeeds() (map[string]string, error) {
	out := map[string]string{}
	for _, seed := range machineModelSeedValues {
		rng := rand.New(rand.NewPCG(seed, 0))
		b := make([]byte, 2048)
		for i := 0; i < len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
		}
		out["random-"+strconv.FormatUint(seed, 10)] = string(b)
	}
	return out, nil
}
