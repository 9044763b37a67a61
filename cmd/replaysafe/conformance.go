package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/replaysafe/replaysafe/internal/conformance"
	"github.com/replaysafe/replaysafe/internal/interop"
)

// The conformance command runs the scenario files of
// internal/conformance/testdata and, with -real, the rows against real
// servers of internal/interop (nginx, haproxy, caddy, started on loopback;
// the rows of a server that is not installed are skipped, named).
func init() {
	extraCommands = append(extraCommands, command{"conformance",
		"run the fault scenarios over loopback, replaysafe beside net/http, x/net/http2 and quic-go (-quick: in seconds; -real: also against nginx, haproxy and caddy)",
		runConformance})
}

// runConformance runs the loopback scenarios, then with -real the
// real-server rows, passing them -quick and -runs; its exit code is the
// worse of the two.
func runConformance(args []string, stdout, stderr io.Writer) int {
	var rest, realArgs []string
	withReal := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); {
		case name == "real" && strings.HasPrefix(a, "-"):
			withReal = true
			continue
		case name == "quick" && strings.HasPrefix(a, "-"):
			realArgs = append(realArgs, a)
		case name == "runs" && strings.HasPrefix(a, "-"):
			realArgs = append(realArgs, a)
			if !strings.Contains(a, "=") && i+1 < len(args) {
				realArgs = append(realArgs, args[i+1])
			}
		}
		rest = append(rest, a)
	}
	code := conformance.Main(rest, stdout, stderr)
	if !withReal || code == 2 {
		return code
	}
	fmt.Fprintln(stdout, "\n== real servers: nginx, haproxy, caddy on loopback (replaysafe beside net/http, x/net, quic-go) ==")
	return max(code, interop.Main(realArgs, stdout, stderr))
}
