package forward

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// TestForwardCleanRequestHeader: RFC 9110 §7.6.1 — "a proxy or gateway MUST parse
// a received Connection header field before a message is forwarded and,
// for each connection-option in this field, remove any header or trailer
// field(s) from the message with the same name as the connection-option,
// and then remove the Connection header field itself"; and the fields
// that are hop-by-hop by definition (Proxy-Connection, Keep-Alive, TE,
// Transfer-Encoding, Upgrade). Then TE per egress (RFC 9110 §10.1.4, RFC
// 9113 §8.2.2) and Upgrade (§7.8).
func TestForwardCleanRequestHeader(t *testing.T) {
	h1 := Dispatch{Version: VersionHTTP11}
	h2 := Dispatch{Version: VersionHTTP2}
	tests := []struct {
		name string
		in   http.Header
		d    Dispatch
		want http.Header
	}{
		{"connection-named field", header("Connection", "X-Foo", "X-Foo", "1", "X-Bar", "2"), h1,
			header("X-Bar", "2")},
		{"several Connection lines, lists, any case, whitespace",
			header("Connection", " x-a ,KEEP-ALIVE", "connection", "X-B,, close", "X-A", "1", "X-B", "2", "Keep-Alive", "timeout=5", "X-C", "3"),
			h1, header("X-C", "3")},
		{"standard hop-by-hop fields", header("Proxy-Connection", "keep-alive", "Keep-Alive", "timeout=5", "Te", "gzip",
			"Transfer-Encoding", "chunked", "Upgrade", "websocket", "Proxy-Authorization", "Basic x", "Trailer", "X-T", "Accept", "*/*"),
			h1, header("Accept", "*/*")},
		{"Connection naming an end-to-end field removes it (the client said so)", header("Connection", "Cache-Control", "Cache-Control", "no-cache"),
			h1, header()},
		{"trailers to HTTP/1.1: canonical Connection: TE and TE: trailers", header("Te", "trailers, deflate", "Connection", "te"),
			Dispatch{Version: VersionHTTP11, Trailers: true}, header("Connection", "TE", "Te", "trailers")},
		{"trailers to HTTP/2: TE: trailers alone", header("Te", "trailers", "Connection", "TE"),
			Dispatch{Version: VersionHTTP2, Trailers: true}, header("Te", "trailers")},
		{"trailers to HTTP/3: TE: trailers alone", header("Te", "trailers"),
			Dispatch{Version: VersionHTTP3, Trailers: true}, header("Te", "trailers")},
		{"trailers to ALPN: no TE (either encoder may take it)", header("Te", "trailers"),
			Dispatch{Version: VersionALPN, Trailers: true}, header()},
		{"no trailers: TE stripped", header("Te", "gzip"), h2, header()},
		// The counterexample rapid found (testdata/rapid/
		// TestForwardCleanRequestHeaderProperty/*.fail, which the property
		// replays): a field named in Connection whose value is empty is
		// still removed; an empty value is a field all the same.
		{"a Connection-named field with an empty value", header("X-A", "", "Connection", "X-A"), h1, header()},
		{"a Connection-named field with an empty value, to HTTP/2", header("X-A", "", "Connection", "x-a", "X-B", ""), h2, header("X-B", "")},
		{"upgrade keeps only its connection fields", header("Connection", "Upgrade, X-Hop", "Upgrade", "websocket", "X-Hop", "1",
			"Keep-Alive", "timeout=1", "Sec-Websocket-Key", "k"),
			Dispatch{Version: VersionHTTP11, Mode: ModeUpgrade, Upgrade: "websocket"},
			header("Connection", "Upgrade", "Upgrade", "websocket", "Sec-Websocket-Key", "k")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cleanRequestHeader(tc.in, tc.d)
			if !reflect.DeepEqual(tc.in, tc.want) {
				t.Errorf("got %v, want %v", tc.in, tc.want)
			}
		})
	}
}

func TestForwardCleanResponseHeader(t *testing.T) {
	up := Dispatch{Version: VersionHTTP11, Mode: ModeUpgrade, Upgrade: "websocket"}
	tests := []struct {
		name   string
		in     http.Header
		status int
		d      Dispatch
		want   http.Header
	}{
		{"hop-by-hop and named fields", header("Connection", "close, X-Hop", "X-Hop", "1", "Keep-Alive", "timeout=5",
			"Transfer-Encoding", "chunked", "Trailer", "X-T", "Content-Type", "text/plain"), 200, Dispatch{},
			header("Content-Type", "text/plain")},
		{"101 to an upgrade keeps Connection: Upgrade", header("Connection", "upgrade", "Upgrade", "websocket", "Sec-Websocket-Accept", "a"),
			101, up, header("Connection", "Upgrade", "Upgrade", "websocket", "Sec-Websocket-Accept", "a")},
		{"200 to an upgrade drops Upgrade", header("Connection", "upgrade", "Upgrade", "websocket"), 200, up, header()},
		{"Proxy-Authenticate is for this hop", header("Proxy-Authenticate", "Basic"), 407, Dispatch{}, header()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cleanResponseHeader(tc.in, tc.status, tc.d)
			if !reflect.DeepEqual(tc.in, tc.want) {
				t.Errorf("got %v, want %v", tc.in, tc.want)
			}
		})
	}
}

// TestForwardVia: RFC 9110 §7.6.3 — received-protocol is the version alone when
// the protocol is HTTP ("1.0", "1.1", "2", "3").
func TestForwardVia(t *testing.T) {
	for _, tc := range []struct {
		major, minor int
		want         string
	}{{1, 0, "1.0 p"}, {1, 1, "1.1 p"}, {2, 0, "2 p"}, {3, 0, "3 p"}} {
		if got := viaValue(tc.major, tc.minor, "p"); got != tc.want {
			t.Errorf("Via(%d,%d) = %q, want %q", tc.major, tc.minor, got, tc.want)
		}
	}
}

// TestForwardedElement: RFC 7239 §4 and §6 — an IPv6 node is bracketed
// and, since ":" and "[" are not token characters, quoted; an unparsable
// one is "unknown"; values that are not tokens are quoted strings.
func TestForwardedElement(t *testing.T) {
	tests := []struct{ addr, proto, host, want string }{
		{"192.0.2.60:4711", "http", "example.com", "for=192.0.2.60;host=example.com;proto=http"},
		{"[2001:db8:cafe::17]:4711", "https", "example.com", `for="[2001:db8:cafe::17]";host=example.com;proto=https`},
		{"[::ffff:192.0.2.1]:1", "http", "", "for=192.0.2.1;proto=http"},
		{"somewhere", "http", "a:8080", `for=unknown;host="a:8080";proto=http`},
		{"192.0.2.1:1", "http", `we"ird`, `for=192.0.2.1;host="we\"ird";proto=http`},
		{"", "https", "", "proto=https"},
	}
	for _, tc := range tests {
		if got := forwardedElement(tc.addr, tc.proto, tc.host); got != tc.want {
			t.Errorf("ForwardedElement(%q, %q, %q) = %s, want %s", tc.addr, tc.proto, tc.host, got, tc.want)
		}
	}
}

// TestRemoveConnectionFieldsInPlace: a Connection field of 9 MiB of
// options, named in every case and spelling the test could think of,
// removes exactly the fields it names and allocates less than 64 KiB
// (before: 132 MiB, a string and a map entry per option).
func TestRemoveConnectionFieldsInPlace(t *testing.T) {
	var list strings.Builder
	for i := 0; list.Len() < 9<<20; i++ {
		fmt.Fprintf(&list, "o%d, ", i)
	}
	list.WriteString("x-NAMED,\tx-dash-name , " + strings.Repeat("long-", 20) + "x")
	h := http.Header{
		"Connection":                      {list.String(), "keep-alive"},
		"X-Named":                         {"1"},
		"X-Dash-Name":                     {"2"},
		"Keep-Alive":                      {"timeout=5"},
		"X-Kept":                          {"3"},
		"O7":                              {"4"},
		strings.Repeat("Long-", 20) + "X": {"5"},
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	removeConnectionFields(h)
	runtime.ReadMemStats(&after)
	if len(h) != 1 || h.Get("X-Kept") != "3" {
		t.Errorf("left %v, want X-Kept alone", h)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("%d bytes allocated for a %d-byte Connection field", n, list.Len())
	}
}

// TestRapidFailFilesAreReplayed: rapid replays a fail file only from
// testdata/rapid/<test name>/<test name>-*.fail of the test's own
// package, so a test renamed or moved leaves its counterexamples behind
// unread. Every fail file here belongs to a rapid test of this package.
func TestRapidFailFilesAreReplayed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "rapid", "*", "*.fail"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no rapid fail file under testdata/rapid")
	}
	tests := map[string]bool{}
	sources, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sources {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") &&
				strings.Contains(string(src[fn.Pos()-1:fn.End()-1]), "rapid.Check(") {
				tests[fn.Name.Name] = true
			}
		}
	}
	for _, f := range files {
		dir := filepath.Base(filepath.Dir(f))
		if !tests[dir] || !strings.HasPrefix(filepath.Base(f), dir+"-") {
			t.Errorf("%s is replayed by no rapid test of package forward (rapid tests: %v)", f, tests)
		}
	}
}
