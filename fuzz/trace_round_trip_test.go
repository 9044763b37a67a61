package fuzz

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzTraceRoundTrip feeds text to the trace-file parser (spec.ParseTraces
// must never panic), prints what it parsed with Request.String,
// Event.String and Expect.String, and checks that the print parses back to
// the same traces (CheckTraceText).
func FuzzTraceRoundTrip(f *testing.F) {
	f.Fuzz(func(t *testing.T, text string) {
		if _, err := CheckTraceText(text); err != nil {
			t.Fatal(err)
		}
	})
}

func init() {
	corpora = append(corpora, corpus{target: "FuzzTraceRoundTrip", typ: "string", seeds: traceRoundTripSeeds})
}

// traceRoundTripSeeds are the spec example files as they are, and a few
// texts that reach the corners of the format.
func traceRoundTripSeeds() (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join("..", "spec", "examples", "*.trace"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{
		"corner-no-example": "request method=PUT body=buffered key=on retry-policy=off resend=on attempt=resend\n" +
			"limits acquire=1s write=1.5ms header=0s body=2h\nstart @-3ms\n" +
			"conn-acquired fresh h2 # no time: the start\n@1µs h2-goaway stream=3 last=1\nexpect resend evidence-goaway-boundary\n",
		"corner-two-examples": "example RS05 decides\nrequest method=OTHER\n@1ms canceled\nexpect fail canceled conn=discard\n\n" +
			"example none not\nrequest method=\n@0s conn-acquired reused h3\n@0s h3-goaway boundary=0 stream=4611686018427387903\n",
		"corner-errors": "request method=GET\n@0s conn-acquired reused h1\nexpect continue progress conn=bogus\n",
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out["spec-"+strings.TrimSuffix(filepath.Base(f), ".trace")] = string(b)
	}
	return out, nil
}
