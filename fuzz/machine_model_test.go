package fuzz

import (
	"encoding/binary"
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
// enough for rapid to run a whole sequence of actions. The bytes come
// from splitmix64, written out here, so that the committed seeds depend
// on no generator a Go release may change.
func machineModelSeeds() (map[string]string, error) {
	out := map[string]string{}
	for _, seed := range machineModelSeedValues {
		state := seed
		b := make([]byte, 2048)
		for i := 0; i < len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], splitmix64(&state))
		}
		out["random-"+strconv.FormatUint(seed, 10)] = string(b)
	}
	return out, nil
}

// splitmix64 advances state and returns its next output (Steele, Lea
// and Flood, "Fast splittable pseudorandom number generators", 2014).
func splitmix64(state *uint64) uint64 {
	*state += 0x9e3779b97f4a7c15
	z := *state
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
