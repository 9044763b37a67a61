package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/replaysafe/replaysafe/spec"
)

func runExplain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: replaysafe explain FILE...  (- reads standard input)\n\nReplays each trace and prints every step, the decision and the rule that\nfired. Exits 1 when an expect line of a trace does not hold. The format is\ndescribed in docs/explain.md.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	status := 0
	for _, name := range fs.Args() {
		traces, err := readTraces(name)
		if err != nil {
			fmt.Fprintf(stderr, "replaysafe explain: %s: %v\n", name, err)
			status = 1
			continue
		}
		for i, t := range traces {
			if len(traces) > 1 || fs.NArg() > 1 {
				fmt.Fprintf(stdout, "== %s trace %d (line %d)\n", name, i+1, t.Line)
			}
			fmt.Fprint(stdout, t.Explain())
			if t.IsCall() {
				action, rule := t.FinalRule()
				fmt.Fprintf(stdout, "call decision: %s by %s %s\n", action, rule.ID(), rule)
			} else {
				final := t.Final()
				fmt.Fprintf(stdout, "decision: %s by %s %s (connection: %s)\n", final.Action, final.Rule.ID(), final.Rule, final.Conn)
			}
			if err := expectationFailure(t); err != nil {
				fmt.Fprintf(stdout, "expectation failed: %v\n", err)
				status = 1
			}
			if i+1 < len(traces) {
				fmt.Fprintln(stdout)
			}
		}
	}
	return status
}

// expectationFailure returns the first expect line of t that does not
// hold, naming that line only (the MISMATCH under its step names the
// same), or, for a spec example whose expectations hold, whether its
// claimed rule decided as claimed.
func expectationFailure(t spec.Trace) error {
	if t.IsCall() {
		for i, d := range t.RunCall() {
			if s := t.Calls[i]; s.Expect != nil && !s.Expect.Holds(d) {
				return fmt.Errorf("trace line %d: %v does not hold: got %v", s.Expect.Line, s.Expect, d)
			}
		}
	} else {
		for _, r := range t.Run() {
			if r.Mismatch {
				return fmt.Errorf("trace line %d: %v does not hold: got %v", r.Step.Expect.Line, r.Step.Expect, r.Decision)
			}
		}
	}
	return t.Check()
}

func readTraces(name string) ([]spec.Trace, error) {
	if name == "-" {
		return spec.ParseTraces(os.Stdin)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return spec.ParseTraces(f)
}
