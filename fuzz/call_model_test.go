package fuzz

import (
	"testing"

	modeltest "github.com/replaysafe/replaysafe/model_test"
)

// FuzzCallModel checks fsm.Call against model_test's call model and the
// call invariants (that no policy makes a copy the rules forbid) on fuzz
// input: natively through rapid (modeltest.CallProperty, random policies
// and outcomes), under OSS-Fuzz's libFuzzer build through the byte
// decoder (DecodeCall, CheckCallBytes).
func FuzzCallModel(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { runCallProperty(t, data) })
}

func init() {
	corpora = append(corpora, corpus{target: "FuzzCallModel", typ: "[]byte", seeds: callModelSeeds})
}

// TestCallBytes runs the byte decoder's check over the seed inputs and a
// sweep of short ones, so that both builds' checks run in go test.
func TestCallBytes(t *testing.T) {
	seeds, err := callModelSeeds()
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range seeds {
		if err := CheckCallBytes([]byte(s)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := CheckHedgedBytes([]byte(s)); err != nil {
			t.Errorf("%s as a hedged call: %v", name, err)
		}
	}
	for name, s := range hedgedSeeds {
		tr := DecodeHedged([]byte(s))
		hedged := false
		for _, st := range tr.Steps {
			hedged = hedged || st.Hedge
		}
		if !hedged || tr.Policy.Hedges == 0 {
			t.Errorf("hedged seed %s decodes to no hedge:\n%s", name, modeltest.FormatHedgeTrace(tr))
		}
	}
	for i := range 1 << 16 {
		data := []byte{byte(i), byte(i >> 8), byte(i * 7), byte(i * 13), byte(i * 31), byte(i >> 3), byte(i >> 5), byte(i * 3)}
		if err := CheckCallBytes(data); err != nil {
			t.Fatalf("% x: %v", data, err)
		}
		if err := CheckHedgedBytes(data); err != nil {
			t.Fatalf("% x as a hedged call: %v", data, err)
		}
	}
}
