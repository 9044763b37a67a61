package soak

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

// Main is the soak command: it parses args, runs the soak (and the peer's
// with -peer), prints the results to stdout and progress to stderr, and
// returns the exit status: 0 when the hard bounds held, 1 when one broke,
// 2 on a usage error or a soak that could not run.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	proto := fs.String("proto", "h2", "protocol: h1, h1tls, h2, h2c or h3")
	n := fs.Int("n", 20000, "number of requests")
	c := fs.Int("c", 64, "goroutines sharing the Transport")
	faults := fs.Float64("faults", 0.05, "probability of a fault per request, 0 to 1")
	seed := fs.Uint64("seed", 0, "seed of the fault draws and the request mix; 0 picks one from the clock")
	maxConns := fs.Int("maxconns", 0, "MaxConnsPerHost of the Transport; 0 means unlimited")
	peer := fs.Bool("peer", false, "also run the soak with the reference client (net/http, x/net/http2, quic-go/http3) and print its numbers")
	faultFree := fs.Bool("faultfree", false, "also run the soak without faults and compare the throughput")
	timeout := fs.Duration("timeout", 30*time.Second, "bound of each call")
	retry := fs.Int("retry", 0, "Options.Retry.MaxAttempts of the replaysafe Transport; 0 means no configured retries")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: replaysafe soak [-proto h1|h1tls|h2|h2c|h3] [-n N] [-c 64] [-faults RATE] [-seed S] [-maxconns K] [-retry N] [-peer] [-faultfree]")
		fmt.Fprintln(stderr, "\nRuns N requests from c goroutines through one Transport against an in-process faulty server")
		fmt.Fprintln(stderr, "on 127.0.0.1 and prints copies per request, success per method, errors by rule, dials and resources.")
		fmt.Fprintln(stderr, "Exits 1 when a hard bound breaks: more than 2 copies, a duplicate non-idempotent delivery,")
		fmt.Fprintln(stderr, "differing copies, or an attempt trace tracecheck rejects.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || *faults < 0 || *faults > 1 || *n <= 0 || *c <= 0 {
		fs.Usage()
		return 2
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := Config{Proto: *proto, N: *n, Concurrency: *c, Faults: *faults, Seed: *seed,
		MaxConns: *maxConns, Retry: *retry, RequestTimeout: *timeout, Progress: stderr}
	res, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "replaysafe soak: %v\n", err)
		if res.Client == "" {
			return 2
		}
	}
	res.Print(stdout)
	status := 0
	if len(res.Violations()) > 0 || err != nil {
		status = 1
	}
	if *faultFree && cfg.Faults > 0 {
		ff := cfg
		ff.Faults = 0
		fres, ferr := Run(ctx, ff)
		if ferr != nil {
			fmt.Fprintf(stderr, "replaysafe soak: fault-free run: %v\n", ferr)
		}
		if fres.Client != "" {
			fmt.Fprintln(stdout)
			fres.Print(stdout)
			ratio := res.ReqPerSec() / max(fres.ReqPerSec(), 1e-9)
			fmt.Fprintf(stdout, "\nthroughput under faults %.0f req/s = %.0f%% of the fault-free %.0f req/s (target ≥ 50%%: %s)\n",
				res.ReqPerSec(), 100*ratio, fres.ReqPerSec(), met(ratio >= 0.5))
			if len(fres.Violations()) > 0 {
				status = 1
			}
		}
	}
	if *peer {
		cfg.Peer = true
		pres, perr := Run(ctx, cfg)
		if perr != nil {
			fmt.Fprintf(stderr, "replaysafe soak: peer: %v\n", perr)
		}
		if pres.Client != "" {
			fmt.Fprintln(stdout)
			pres.Print(stdout)
			fmt.Fprintf(stdout, "\ndials: replaysafe %s, %s %s; server accepted: replaysafe %d, %s %d\n",
				dialString(res.Dials), pres.Client, dialString(pres.Dials), res.Accepted, pres.Client, pres.Accepted)
			if cfg.Proto == "h1" || cfg.Proto == "h1tls" {
				fmt.Fprintf(stdout, "HTTP/1.1 dials ≤ %s's (target): %s\n", pres.Client, met(res.Dials <= pres.Dials))
			}
		}
	}
	return status
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func dialString(n int) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprint(n)
}
