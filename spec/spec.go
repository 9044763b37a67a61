// Package spec holds replaysafe's dispatch rules as data: each rule's stable
// ID, its statement in plain words, its source, and example traces where it
// decides and where it must not. Every test layer replays the examples, and
// the generators write docs/rules.md and docs/diagram.md from this package.
//
//go:generate go run ./internal/gendocs -dir ../docs
//go:generate go run ./internal/genarch -o ../docs/architecture.md
package spec

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/spec/ruledata"
)

//go:embed examples/*.trace
var examples embed.FS

// Rule is one rule with its fsm value.
type Rule struct {
	ruledata.Rule
	Value fsm.Rule
}

// Rules returns every rule in precedence order.
func Rules() []Rule {
	out := make([]Rule, len(ruledata.Rules))
	for i, r := range ruledata.Rules {
		out[i] = Rule{Rule: r, Value: fsm.Rule(r.Number)}
	}
	return out
}

// Example is a trace from spec/examples, with the file it came from.
type Example struct {
	File string
	Trace
}

// Examples parses every example trace, sorted by file and line.
func Examples() ([]Example, error) {
	names, err := fs.Glob(examples, "examples/*.trace")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []Example
	for _, name := range names {
		f, err := examples.Open(name)
		if err != nil {
			return nil, err
		}
		ts, err := ParseTraces(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, t := range ts {
			out = append(out, Example{File: path.Base(name), Trace: t})
		}
	}
	return out, nil
}

// ExamplesFor returns the examples whose claim is r.
func ExamplesFor(all []Example, r fsm.Rule) (decides, not []Example) {
	for _, e := range all {
		if e.Claim != r {
			continue
		}
		if e.Decides {
			decides = append(decides, e)
		} else {
			not = append(not, e)
		}
	}
	return decides, not
}
