// Command replaysafe prints replaysafe's dispatch rules, explains recorded
// traces, runs the conformance scenarios, soaks, fuzz campaigns and
// benchmarks, and forwards requests as a sidecar.
//
// Usage:
//
//	replaysafe rules [-json]          print the rule table
//	replaysafe explain FILE...        replay trace files step by step
//	replaysafe conformance [flags]    fault scenarios over loopback, counted at the server
//	replaysafe fuzz [flags]           run the fuzz targets as a campaign
//	replaysafe bench [flags]          run the benchmarks, replaysafe beside its peers (from the repository root)
//	replaysafe soak [flags]           many concurrent requests against an in-process faulty server, bounds checked
//	replaysafe forward -to URL [flags] forward requests to one upstream, as a sidecar
//
// Run "replaysafe COMMAND -h" for a command's flags.
package main

import (
	"fmt"
	"io"
	"os"
)

type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return append([]command{
		{"rules", "print the rule table", runRules},
		{"explain", "replay trace files and show which rule decided", runExplain},
	}, extraCommands...)
}

// extraCommands are registered by the files that wire in other packages.
var extraCommands []command

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "replaysafe: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: replaysafe COMMAND [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
}
