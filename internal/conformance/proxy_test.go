package conformance

import (
	"strings"
	"testing"
)

// The proxy rows run over TLS only and show up in the command's table
// beside net/http.
func TestProxyRows(t *testing.T) {
	var names []string
	for _, c := range Cases() {
		if c.Proxy != nil {
			names = append(names, c.Name())
		}
	}
	want := "proxy-get-tunnel-cut/tls proxy-post-tunnel-cut/tls proxy-put-tunnel-cut/tls proxy-get-tunnel-cut-seen/tls proxy-407/tls"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("proxy cases %q, want %q", got, want)
	}
	code, out, errs := runMain("-runs", "2", "-case", `^proxy-407/tls$`)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if !strings.Contains(out, "GET through a CONNECT proxy that answers 407 (proxy-407)") {
		t.Errorf("output lacks the scenario title:\n%s", out)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[0] == "tls" {
			rows[f[1]] = strings.Join(f[2:], " ")
		}
	}
	if r := rows[Replaysafe]; !strings.HasPrefix(r, "error 2/2 0 RS04 ok") {
		t.Errorf("replaysafe row %q:\n%s", r, out)
	}
	if r := rows[NetHTTP]; !strings.HasPrefix(r, "error 2/2 0 - ok") {
		t.Errorf("net/http row %q:\n%s", r, out)
	}
}
