package fuzz

import (
	"strconv"
	"strings"
	"testing"

	modeltest "github.com/replaysafe/replaysafe/model_test"
	"github.com/replaysafe/replaysafe/spec"
)

// FuzzMachineBytes decodes the fuzzer's bytes into a trace (Decode) and
// checks fsm against the model after every event, the invariants over the
// attempt, and the call's second attempt after a resend.
func FuzzMachineBytes(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := CheckMachineBytes(data); err != nil {
			t.Fatal(err)
		}
	})
}

func init() {
	corpora = append(corpora, corpus{target: "FuzzMachineBytes", typ: "[]byte", seeds: machineBytesSeeds})
}

// machineBytesSeeds encodes every spec example the byte format can hold.
func machineBytesSeeds() (map[string]string, error) {
	all, err := spec.Examples()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, ex := range all {
		if ex.IsCall() {
			continue // a call trace has outcomes, not events: fsm.Call's, not the machine's
		}
		tr := modeltest.Trace{Request: ex.Request, Limits: ex.Limits, Start: ex.Start}
		for _, s := range ex.Steps {
			tr.Events = append(tr.Events, s.Event)
		}
		b, err := Encode(tr)
		if err != nil {
			continue // not every example fits the byte format; the text target has them all
		}
		out[strings.TrimSuffix(ex.File, ".trace")+"-"+strconv.Itoa(i)] = string(b)
	}
	return out, nil
}
