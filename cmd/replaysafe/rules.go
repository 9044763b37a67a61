package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/replaysafe/replaysafe/spec"
)

// rulesWidth is the column at which rules wraps its output.
const rulesWidth = 100

func runRules(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the rules as JSON")
	verbose := fs.Bool("v", false, "print each rule's statement and full source under its row")
	sources := fs.Bool("sources", false, "print only the sources the rules cite, with what each is")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: replaysafe rules [-json] [-v] [-sources]\n\nPrints every dispatch rule in precedence order, then the sources they cite.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "replaysafe rules: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	rules := spec.Rules()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rules); err != nil {
			fmt.Fprintln(stderr, "replaysafe rules:", err)
			return 1
		}
		return 0
	}
	var b strings.Builder
	if *sources {
		writeSources(&b, true)
	} else {
		writeRules(&b, rules, *verbose)
		b.WriteString("\n")
		writeSources(&b, false)
	}
	if _, err := io.WriteString(stdout, b.String()); err != nil {
		fmt.Fprintln(stderr, "replaysafe rules:", err)
		return 1
	}
	return 0
}

// writeRules prints one row a rule: ID, slug, action and the names of its
// sources, wrapped within the SOURCE column. With verbose, the statement
// and the full source follow under the row, wrapped at rulesWidth.
func writeRules(b *strings.Builder, rules []spec.Rule, verbose bool) {
	idW, slugW, actW := len("ID"), len("RULE"), len("DECIDES")
	for _, r := range rules {
		idW, slugW, actW = max(idW, len(r.ID)), max(slugW, len(r.Slug)), max(actW, len(r.Action))
	}
	srcCol := idW + slugW + actW + 3*len("  ")
	row := func(id, slug, act, src string) {
		prefix := fmt.Sprintf("%-*s  %-*s  %-*s  ", idW, id, slugW, slug, actW, act)
		lines := wrap(src, rulesWidth-srcCol)
		if len(lines) == 0 {
			lines = []string{""}
		}
		for i, l := range lines {
			if i == 0 {
				b.WriteString(strings.TrimRight(prefix+l, " ") + "\n")
			} else {
				b.WriteString(strings.Repeat(" ", srcCol) + l + "\n")
			}
		}
	}
	row("ID", "RULE", "DECIDES", "SOURCE")
	indent := strings.Repeat(" ", idW+len("  "))
	// Each machine applies its own rules in list order, and the list
	// interleaves them (a later attempt rule may follow call rules): the
	// attempt rules print first, then the call rules, each in list order.
	var grouped []spec.Rule
	for _, call := range []bool{false, true} {
		for _, r := range rules {
			if r.Call == call {
				grouped = append(grouped, r)
			}
		}
	}
	for i, r := range grouped {
		if r.Call && (i == 0 || !grouped[i-1].Call) {
			b.WriteString("-- call rules: fsm.Call, between wire attempts (docs/retries.md) --\n")
		}
		row(r.ID, r.Slug, r.Action, strings.Join(r.SourceNames(), ", "))
		if verbose {
			for _, l := range wrap(r.Statement, rulesWidth-len(indent)) {
				b.WriteString(indent + l + "\n")
			}
			for _, l := range wrap("Source: "+r.Source+".", rulesWidth-len(indent)) {
				b.WriteString(indent + l + "\n")
			}
			b.WriteString("\n")
		}
	}
}

// writeSources prints every source the rules cite: its name, the page
// under docs/ that explains it and what it is; long adds what the rules
// take from it.
func writeSources(b *strings.Builder, long bool) {
	b.WriteString("SOURCES (what each name in the SOURCE column is, and its page)\n")
	nameW := 0
	for _, s := range spec.Sources() {
		nameW = max(nameW, len(s.Name))
	}
	const indent = "    "
	for i, s := range spec.Sources() {
		if long && i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(b, "%-*s  docs/%s\n", nameW, s.Name, s.Doc)
		text := s.Title + "."
		if long {
			text += " " + s.Summary
		}
		for _, l := range wrap(text, rulesWidth-len(indent)) {
			b.WriteString(indent + l + "\n")
		}
	}
}

// wrap breaks s into lines of at most width columns at spaces; a word
// longer than width gets a line of its own.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len([]rune(line))+1+len([]rune(w)) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
