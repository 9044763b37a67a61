package interop

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
)

// Main runs the real-server rows as a command (for `replaysafe
// conformance -real`): flags -runs N, -case REGEX, -server LIST and
// -quick. It returns the exit code: 0 when every row ran and met its
// bounds, 1 when one did not (or, with CI=true, when a server is
// missing), 2 for bad flags. Missing servers are otherwise skipped with
// one line each.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("real", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runs := fs.Int("runs", FullRuns, "runs of each row")
	pattern := fs.String("case", "", "run only the rows whose ID matches this regular expression")
	servers := fs.String("server", "", "comma-separated servers to run (nginx, haproxy, caddy); empty means all")
	quick := fs.Bool("quick", false, "run each row a few times only (overrides -runs)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "real: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *runs < 1 || *runs > 1000 {
		fmt.Fprintln(stderr, "real: -runs must be between 1 and 1000")
		return 2
	}
	cfg := Config{Runs: *runs}
	if *quick {
		cfg = Config{Quick: true}
	}
	if *pattern != "" {
		re, err := regexp.Compile(*pattern)
		if err != nil {
			fmt.Fprintf(stderr, "real: -case: %v\n", err)
			return 2
		}
		cfg.Match = re
	}
	if *servers != "" {
		for _, s := range strings.Split(*servers, ",") {
			if !contains(Servers, s) {
				fmt.Fprintf(stderr, "real: unknown server %q (want %s)\n", s, strings.Join(Servers, ", "))
				return 2
			}
			cfg.Servers = append(cfg.Servers, s)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sum, err := Run(ctx, stdout, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if len(sum.Missing) > 0 && os.Getenv("CI") == "true" {
		fmt.Fprintf(stderr, "real: CI=true and servers are missing: %v\n", sum.Missing)
		return 1
	}
	return 0
}
