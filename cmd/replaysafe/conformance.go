package main

import "github.com/replaysafe/replaysafe/internal/conformance"

// The conformance command runs the scenario files of
// internal/conformance/testdata. Another section (real servers, say) is
// added by setting conformance.ExtraFlags and conformance.Extra in an
// init function here: Main then streams its cases after the built-in
// ones, with the same rows, progress lines and summary.
func init() {
	extraCommands = append(extraCommands, command{"conformance", "run the fault scenarios over loopback, replaysafe beside net/http, x/net/http2 and quic-go (-quick: in seconds)", conformance.Main})
}
