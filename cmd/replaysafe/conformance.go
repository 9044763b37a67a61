package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe/internal/harness/conformance"
	"github.com/replaysafe/replaysafe/internal/harness/interop"
	"github.com/replaysafe/replaysafe/internal/harness/retrycmp"
)

// The conformance command runs the scenario files of
// internal/harness/conformance/testdata, then the retry rows of
// internal/harness/retrycmp and, with -real, the rows against real
// servers of internal/harness/interop (nginx, haproxy, caddy, started on
// loopback; the rows of a server that is not installed are skipped,
// named).
func init() {
	extraCommands = append(extraCommands, command{"conformance",
		"run the fault scenarios over loopback, replaysafe beside net/http, x/net/http2 and quic-go (-quick: in seconds; -real: also against nginx, haproxy and caddy)",
		runConformance})
}

// conformanceUsage is the text of conformance -h before the flags.
const conformanceUsage = `usage: replaysafe conformance [-quick] [-json] [-runs N] [-case REGEX] [-real [-server LIST]]

Runs, in turn:
  1. the fault scenarios over loopback against replaysafe and its peers (net/http,
     x/net/http2, quic-go/http3), each with a fresh scripted server that counts the copies
     of the request it receives (the files of internal/harness/conformance/testdata);
  2. without -case, the retry rows: each scenario with replaysafe, with and without
     Options.Retry, beside net/http, go-retryablehttp and resty;
  3. with -real, the rows against nginx, haproxy and caddy started on loopback (a server
     that is not installed is skipped, named; under CI=true that fails).
Tables go to standard output and progress to standard error; with -json standard output
is one JSON document instead: {"scenarios": [...], "retries": [...], "real": {...}}.
Exits 0 when replaysafe met every expectation, 1 when it did not, 2 for a bad command line.

flags:
`

// conformanceDoc is what -json writes: every section's results.
type conformanceDoc struct {
	Scenarios []conformance.Report `json:"scenarios"`
	Retries   []retrycmp.Row       `json:"retries,omitempty"`
	Real      *interop.Summary     `json:"real,omitempty"`
}

// runConformance parses the command line with one flag set, then runs
// the loopback scenarios, the retry rows (without -case) and the
// real-server rows (with -real); its exit code is the worst of them.
func runConformance(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f conformance.Flags
	f.Register(fs)
	withReal := fs.Bool("real", false, "also run the rows against real servers (nginx, haproxy, caddy) on loopback, with -runs and -quick")
	servers := fs.String("server", "", "with -real: comma-separated servers to run ("+strings.Join(interop.Servers, ", ")+"); empty means all")
	fs.Usage = func() {
		fmt.Fprint(stderr, conformanceUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usageError := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "conformance: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %q (see -h)", fs.Args())
	}
	set, err := f.Settings()
	if err != nil {
		return usageError("%v", err)
	}
	realCfg := interop.Config{Runs: f.Runs}
	if f.Quick {
		realCfg = interop.Config{Quick: true} // each row's quick count, whatever -runs says
	}
	if *servers != "" {
		if !*withReal {
			return usageError("-server needs -real")
		}
		for _, s := range strings.Split(*servers, ",") {
			if !slices.Contains(interop.Servers, s) {
				return usageError("-server: unknown server %q (want %s)", s, strings.Join(interop.Servers, ", "))
			}
			realCfg.Servers = append(realCfg.Servers, s)
		}
	}

	table := stdout
	if f.JSON {
		table = io.Discard
	}
	var doc conformanceDoc
	reps, code := conformance.RunSuite(f, fs, table, stderr)
	if code == 2 {
		return code
	}
	doc.Scenarios = reps
	if f.Case == "" {
		rows, rowsCode := retryRows(retrycmp.Options{Runs: f.Runs, Quick: set.Quick}, table, stderr)
		doc.Retries = rows
		code = max(code, rowsCode)
	}
	if *withReal {
		sum, realCode := realRows(realCfg, table, stderr)
		doc.Real = sum
		code = max(code, realCode)
	}
	if f.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			fmt.Fprintf(stderr, "conformance: %v\n", err)
			return 1
		}
	}
	return code
}

// retryRows runs the retry comparison (internal/harness/retrycmp): every
// scenario with replaysafe, with and without Options.Retry, beside
// net/http, go-retryablehttp and resty, and prints its table to table.
// It fails when replaysafe sent a second copy of a POST the server may
// have processed.
func retryRows(o retrycmp.Options, table, stderr io.Writer) ([]retrycmp.Row, int) {
	fmt.Fprintln(table, "\n== retries: copies at the server, replaysafe beside net/http, go-retryablehttp and resty ==")
	fmt.Fprintln(stderr, "conformance: the retry rows")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rows, err := retrycmp.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "conformance: retries: %v\n", err)
		return nil, 1
	}
	if err := retrycmp.Print(table, rows); err != nil {
		fmt.Fprintf(stderr, "conformance: retries: %v\n", err)
		return rows, 1
	}
	code := 0
	for _, r := range rows {
		if strings.HasPrefix(r.Client, "replaysafe") && r.SideEffect && r.MaxCopies > 1 {
			fmt.Fprintf(table, "FAIL %s: %s sent %d copies of a POST\n", r.Scenario, r.Client, r.MaxCopies)
			fmt.Fprintf(stderr, "conformance: FAIL %s: %s sent %d copies of a POST\n", r.Scenario, r.Client, r.MaxCopies)
			code = 1
		}
	}
	fmt.Fprintf(table, "retries: %d rows in %v\n", len(rows), time.Since(start).Round(time.Millisecond))
	return rows, code
}

// realRows runs the real-server rows (internal/harness/interop) and
// prints their tables to table. Under CI=true a server that is missing
// fails the command.
func realRows(cfg interop.Config, table, stderr io.Writer) (*interop.Summary, int) {
	fmt.Fprintln(table, "\n== real servers: nginx, haproxy, caddy on loopback (replaysafe beside net/http, x/net, quic-go) ==")
	fmt.Fprintln(stderr, "conformance: the real-server rows")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sum, err := interop.Run(ctx, table, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "conformance: real servers: %v\n", err)
		return &sum, 1
	}
	if len(sum.Missing) > 0 && os.Getenv("CI") == "true" {
		fmt.Fprintf(stderr, "conformance: CI=true and servers are missing: %v\n", sum.Missing)
		return &sum, 1
	}
	return &sum, 0
}
