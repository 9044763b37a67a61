package fuzz

import (
	"encoding/binary"
	"strconv"
)

// corpus is what a fuzz target starts from besides the files under
// testdata/fuzz/<target>/: the seeds generated from the spec examples
// (TestSeedCorpora keeps them written there as seed-* files) and the
// arguments the target passes to f.Add. go-118-fuzz-build's F ignores
// f.Add, so the libFuzzer seed corpus (TestLibFuzzerSeeds) takes them from
// here.
type corpus struct {
	target string
	typ    string                            // the generated seeds' Go type: []byte or string
	seeds  func() (map[string]string, error) // the generated seeds, or nil
	added  [][]any                           // the arguments of each f.Add call, in order
}

// corpora holds every target's corpus. Each target's file registers its
// own in an init function, so that the target's name appears in that file
// only: OSS-Fuzz's compile_native_go_fuzzer finds a target's file by
// grepping for the name. The declarations are in this file, not a test
// file, because go-118-fuzz-build compiles a target's own file with the
// package's non-test files and without the other test files.
var corpora []corpus

// machineModelSeedValues are PCG seeds whose 2 KiB of output is enough
// for rapid to finish a sequence of actions (it skips an input that runs
// out of bytes); short inputs keep the fuzzer's minimisation quick.
var machineModelSeedValues = []uint64{1, 2, 7, 9, 10, 12}

// machineModelSeeds are a few random inputs, from fixed seeds, long
// enough for rapid to run a whole sequence of actions. The bytes come
// from splitmix64, written out here, so that the committed seeds depend
// on no generator a Go release may change. The machine and the call
// targets both start from them.
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

// hedgedSeeds are hedged calls in DecodeHedged's bytes, one for each way
// the hedging rules decide: a GET hedged whose hedge wins, a copy failing
// beside the other, both failing into a configured retry, a keyed POST
// with keyed hedges, a POST without a key refused, the budget spent, the
// first copy's early data rejected beside a hedge.
var hedgedSeeds = map[string]string{
	"hedge-wins":           "\x00\x0b\x07\x00\x03\x00",
	"hedge-copy-failed":    "\x00\x0b\x07\x00\x18\x10\x03\x00",
	"hedge-both-fail":      "\x00\x0b\x07\x00\x18\x10\x18\x90\x03\x00",
	"hedge-keyed-post":     "\x0d\x2b\x07\x00\x03\x00",
	"hedge-post-refused":   "\x09\x2b\x07\x00\x03\x00",
	"hedge-budget-spent":   "\x00\x13\x07\x00\x0f\x00\x03\x00",
	"hedge-status-retried": "\x00\x4b\x07\x00\x03\x06",
	"hedge-early-rejected": "\x00\x0b\x07\x00\x32\x10\x03\x00",
}

// callModelSeeds are the call target's seeds: the random inputs of
// machineModelSeeds and hedgedSeeds.
func callModelSeeds() (map[string]string, error) {
	out, err := machineModelSeeds()
	if err != nil {
		return nil, err
	}
	for name, s := range hedgedSeeds {
		out[name] = s
	}
	return out, nil
}
