package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/replaysafe/internal/harness/conformance"
	"github.com/replaysafe/replaysafe/internal/harness/interop"
	"github.com/replaysafe/replaysafe/internal/harness/retrycmp"
)

// The conformance command runs the scenario files of
// internal/harness/conformance/testdata and, with -real, the rows against real
// servers of internal/harness/interop (nginx, haproxy, caddy, started on loopback;
// the rows of a server that is not installed are skipped, named).
func init() {
	extraCommands = append(extraCommands, command{"conformance",
		"run the fault scenarios over loopback, replaysafe beside net/http, x/net/http2 and quic-go (-quick: in seconds; -real: also against nginx, haproxy and caddy)",
		runConformance})
}

// runConformance runs the loopback scenarios, then (without -case) the
// retry rows beside go-retryablehttp and resty, then with -real the
// real-server rows, passing them -quick and -runs; its exit code is the
// worst of them.
func runConformance(args []string, stdout, stderr io.Writer) int {
	var rest, realArgs []string
	withReal, oneCase := false, false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); {
		case name == "real" && strings.HasPrefix(a, "-"):
			withReal = true
			continue
		case name == "quick" && strings.HasPrefix(a, "-"):
			realArgs = append(realArgs, a)
		case name == "case" && strings.HasPrefix(a, "-"):
			oneCase = true
		case name == "runs" && strings.HasPrefix(a, "-"):
			realArgs = append(realArgs, a)
			if !strings.Contains(a, "=") && i+1 < len(args) {
				realArgs = append(realArgs, args[i+1])
			}
		}
		rest = append(rest, a)
	}
	code := conformance.Main(rest, stdout, stderr)
	if code == 2 {
		return code
	}
	if !oneCase {
		code = max(code, retryRows(realArgs, stdout, stderr))
	}
	if !withReal {
		return code
	}
	fmt.Fprintln(stdout, "\n== real servers: nginx, haproxy, caddy on loopback (replaysafe beside net/http, x/net, quic-go) ==")
	return max(code, interop.Main(realArgs, stdout, stderr))
}

// retryRows runs the retry comparison (internal/harness/retrycmp): every scenario
// with replaysafe, with and without Options.Retry, beside net/http,
// go-retryablehttp and resty. It fails when replaysafe sent a second copy
// of a POST the server may have processed.
func retryRows(args []string, stdout, stderr io.Writer) int {
	o := retrycmp.Options{}
	for i, a := range args {
		name, v, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case name == "quick":
			o.Quick = v == "" || v == "true"
		case name == "runs" && v == "" && i+1 < len(args):
			v = args[i+1]
			fallthrough
		case name == "runs":
			o.Runs, _ = strconv.Atoi(v)
		}
	}
	fmt.Fprintln(stdout, "\n== retries: copies at the server, replaysafe beside net/http, go-retryablehttp and resty ==")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rows, err := retrycmp.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "conformance: retries: %v\n", err)
		return 1
	}
	if err := retrycmp.Print(stdout, rows); err != nil {
		fmt.Fprintf(stderr, "conformance: retries: %v\n", err)
		return 1
	}
	code := 0
	for _, r := range rows {
		if strings.HasPrefix(r.Client, "replaysafe") && r.SideEffect && r.MaxCopies > 1 {
			fmt.Fprintf(stdout, "FAIL %s: %s sent %d copies of a POST\n", r.Scenario, r.Client, r.MaxCopies)
			code = 1
		}
	}
	fmt.Fprintf(stdout, "retries: %d rows in %v\n", len(rows), time.Since(start).Round(time.Millisecond))
	return code
}
