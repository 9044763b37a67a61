package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/replaysafe/replaysafe/spec"
)

func runRules(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the rules as JSON")
	verbose := fs.Bool("v", false, "print each rule's statement and source")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: replaysafe rules [-json] [-v]\n\nPrints every dispatch rule in precedence order.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
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
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRULE\tDECIDES\tSOURCE")
	for _, r := range rules {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Slug, r.Action, r.Source)
		if *verbose {
			fmt.Fprintf(tw, "\t  %s\t\t\n", r.Statement)
		}
	}
	if err := tw.Flush(); err != nil {
		return 1
	}
	return 0
}
