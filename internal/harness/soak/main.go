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
// returns the exit status: 0 when the hard bounds held, 1 when one broke
// (targets never change it), 2 on a usage error or a soak that could not
// run or was interrupted.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	proto := fs.String("proto", "h2", "protocol: h1, h1tls, h2, h2c or h3")
	modelName := fs.String("model", "prod", "fault model: prod (the faults of production servers and networks) or harsh (a stress test of the hard bounds: most faults kill the whole connection)")
	n := fs.Int("n", 20000, "number of requests")
	c := fs.Int("c", 64, "goroutines sharing the Transport")
	faults := fs.Float64("faults", 0.05, "probability of a request fault per request (prod: per copy, stream-level), 0 to 1")
	connLife := fs.Int("conn-life", DefaultConnLife, "prod: mean number of requests a connection carries before the server ends it (half gracefully, half abruptly)")
	restarts := fs.Duration("restarts", DefaultRestarts, "prod: period of the server restarts (every connection reset, the port refusing for 100ms); 0 means none")
	seed := fs.Uint64("seed", 0, "seed of the fault draws and the request mix; 0 picks one from the clock (printed)")
	maxConns := fs.Int("maxconns", 0, "MaxConnsPerHost of the Transport; 0 means unlimited")
	peer := fs.Bool("peer", false, "also run the soak with the reference client (net/http, x/net/http2, quic-go/http3) and print its numbers")
	faultFree := fs.Bool("faultfree", false, "also run the soak without faults and compare the throughput")
	timeout := fs.Duration("timeout", 30*time.Second, "bound of each call")
	retry := fs.Int("retry", 0, "Options.Retry.MaxAttempts of the replaysafe Transport; 0 means no configured retries")
	retryAfterMax := fs.Duration("retry-after-max", 0, "with -retry: Options.Retry.MaxRetryAfter; a 503 that asks for longer (prod asks for 1s) is delivered and set apart; 0 means the policy's default (30s), which waits")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: replaysafe soak [-proto h1|h1tls|h2|h2c|h3] [-model prod|harsh] [-n N] [-c 64] [-faults RATE]")
		fmt.Fprintln(stderr, "                      [-conn-life 500] [-restarts 5s] [-seed S] [-maxconns K] [-retry N]")
		fmt.Fprintln(stderr, "                      [-retry-after-max D] [-peer] [-faultfree]")
		fmt.Fprintln(stderr, "\nRuns N requests from c goroutines through one Transport against an in-process faulty server")
		fmt.Fprintln(stderr, "on 127.0.0.1 and prints copies per request, the outcome of every call (ok, failed, or set apart:")
		fmt.Fprintln(stderr, "cut after its response started, refused by RS05/RS06/RS17/RS19, 503 delivered), failures by rule,")
		fmt.Fprintln(stderr, "dials and resources, then the targets of the model as met or not met.")
		fmt.Fprintln(stderr, "\nExit status: 1 only when a hard bound breaks: more than 2 copies of a request (N with -retry N),")
		fmt.Fprintln(stderr, "a POST delivered twice, differing copies, an attempt trace tracecheck rejects, or goroutines and fds")
		fmt.Fprintln(stderr, "not back after CloseIdleConnections. A target not met does not change it. 2 on a usage error or a")
		fmt.Fprintln(stderr, "run that could not complete; 0 otherwise.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	model, merr := ParseModel(*modelName)
	if merr != nil {
		fmt.Fprintln(stderr, merr)
	}
	if merr != nil || fs.NArg() > 0 || *faults < 0 || *faults > 1 || *n <= 0 || *c <= 0 || *connLife <= 0 || *restarts < 0 {
		fs.Usage()
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := Config{Proto: *proto, Model: model, N: *n, Concurrency: *c, Faults: *faults, ConnLife: *connLife,
		Restarts: *restarts, Seed: *seed, MaxConns: *maxConns, Retry: *retry, RetryAfterMax: *retryAfterMax, RequestTimeout: *timeout, Progress: stderr}
	fmt.Fprintln(stdout, Header(cfg, !set["proto"], !set["model"]))
	res, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "replaysafe soak: %v\n", err)
		if res.Client == "" {
			return 2
		}
	}
	res.Print(stdout)
	status := exitStatus(&res, err)
	if *faultFree && cfg.Faults > 0 {
		ff := cfg
		ff.Faults, ff.Restarts, ff.ConnLife = 0, 0, -1
		fres, ferr := Run(ctx, ff)
		if ferr != nil {
			fmt.Fprintf(stderr, "replaysafe soak: fault-free run: %v\n", ferr)
		}
		if fres.Client != "" {
			fmt.Fprintln(stdout)
			fres.Print(stdout)
			want := 0.8
			if model == ModelHarsh {
				want = 0.5
			}
			ratio := res.ReqPerSec() / max(fres.ReqPerSec(), 1e-9)
			fmt.Fprintf(stdout, "\nthroughput under faults %.0f req/s = %.0f%% of the fault-free %.0f req/s (target ≥ %.0f%%: %s)\n",
				res.ReqPerSec(), 100*ratio, fres.ReqPerSec(), 100*want, met(ratio >= want))
			status = max(status, exitStatus(&fres, ferr))
		}
	}
	var pres *Result
	if *peer {
		cfg.Peer = true
		pr, perr := Run(ctx, cfg)
		if perr != nil {
			fmt.Fprintf(stderr, "replaysafe soak: peer: %v\n", perr)
			if ctx.Err() != nil {
				status = 2
			}
		}
		if pr.Client != "" {
			pres = &pr
			fmt.Fprintln(stdout)
			pr.Print(stdout)
			fmt.Fprintf(stdout, "\nreplaysafe beside %s: idempotent success %.2f%% vs %.2f%% of recoverable calls; dials %s vs %s; server accepted %d vs %d\n",
				pr.Client, 100*res.RecoverableIdempotentRate(), 100*pr.RecoverableIdempotentRate(),
				dialString(res.Dials), dialString(pr.Dials), res.Accepted, pr.Accepted)
		}
	}
	fmt.Fprintln(stdout)
	res.PrintTargets(stdout, pres)
	return status
}

// exitStatus is 1 when res broke a hard bound, 2 when the run did not
// complete (err), else 0.
func exitStatus(res *Result, err error) int {
	switch {
	case err != nil:
		return 2
	case len(res.Violations()) > 0:
		return 1
	}
	return 0
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
