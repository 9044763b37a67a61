package replaysafe_test

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/replaysafe/replaysafe"
)

// fieldTableHeading opens the table of docs/guarantees.md that maps every
// field of net/http's Transport to replaysafe.
const fieldTableHeading = "## http.Transport field → replaysafe"

// TestTransportFieldTable: every exported field of net/http's Transport,
// as the Go release running the test has them (reflect), has a row in
// docs/guarantees.md's table, and no cell of any row is blank. A Go
// release that adds a field fails this test until the table says what
// replaysafe does with it.
func TestTransportFieldTable(t *testing.T) {
	doc, err := os.ReadFile("docs/guarantees.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := fieldTableRows(t, string(doc))
	typ := reflect.TypeFor[http.Transport]()
	n := 0
	for f := range typ.Fields() {
		if !f.IsExported() {
			continue
		}
		n++
		if _, ok := rows[f.Name]; !ok {
			t.Errorf("http.Transport.%s has no row in docs/guarantees.md's table", f.Name)
		}
	}
	for name, cells := range rows {
		for i, c := range cells {
			if strings.TrimSpace(c) == "" {
				t.Errorf("row %s: cell %d is blank", name, i+1)
			}
		}
	}
	if n == 0 || len(rows) < n {
		t.Errorf("%d rows for %d fields", len(rows), n)
	}
}

// fieldTableRows returns the cells after the first of each row of the
// table under fieldTableHeading, by the field the first cell names.
func fieldTableRows(t *testing.T, doc string) map[string][]string {
	_, section, ok := strings.Cut(doc, "\n"+fieldTableHeading+"\n")
	if !ok {
		t.Fatalf("docs/guarantees.md has no %q section", fieldTableHeading)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	field := regexp.MustCompile("^`([A-Z][A-Za-z0-9]*)`")
	rows := map[string][]string{}
	for line := range strings.Lines(section) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		m := field.FindStringSubmatch(strings.TrimSpace(cells[0]))
		if m == nil {
			continue // the header and its separator
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("two rows for %s", m[1])
		}
		if len(cells) != 3 {
			t.Errorf("row %s has %d cells, want 3", m[1], len(cells))
		}
		rows[m[1]] = cells[1:]
	}
	return rows
}

// fieldServers starts an http origin and an https one that speaks
// HTTP/2, both running handler, and returns their URLs and a TLS
// configuration that trusts the https one.
func fieldServers(t *testing.T, handler http.Handler) (plain, secure string, trust *tls.Config) {
	h1 := httptest.NewServer(handler)
	t.Cleanup(h1.Close)
	h2 := httptest.NewUnstartedServer(handler)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	return h1.URL, h2.URL, h2.Client().Transport.(*http.Transport).TLSClientConfig
}

// TestDisableCompression: by default a request without Accept-Encoding
// asks for gzip and the gzip answer is decoded (Response.Uncompressed),
// as net/http does, over HTTP/1.1 and HTTP/2; with DisableCompression
// the server receives no Accept-Encoding and the body comes as sent.
func TestDisableCompression(t *testing.T) {
	var mu sync.Mutex
	asked := map[string][]string{}
	plain, secure, trust := fieldServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = append(asked[r.URL.Path], r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		if r.Header.Get("Accept-Encoding") != "gzip" {
			io.WriteString(w, "hello")
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		z := gzip.NewWriter(w)
		io.WriteString(z, "hello")
		z.Close()
	}))
	for _, c := range []struct {
		name    string
		disable bool
		want    string // the Accept-Encoding the server received
	}{{"default", false, "gzip"}, {"disabled", true, ""}} {
		tr := replaysafe.New(replaysafe.Options{IgnoreProxyEnvironment: true, TLSClientConfig: trust.Clone(), DisableCompression: c.disable})
		t.Cleanup(tr.CloseIdleConnections)
		for _, base := range []string{plain, secure} {
			path := "/" + c.name + "/" + base[:strings.Index(base, ":")]
			req, _ := http.NewRequest("GET", base+path, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "hello" || resp.Uncompressed != !c.disable {
				t.Errorf("%s: body %q, Uncompressed %v", path, body, resp.Uncompressed)
			}
			mu.Lock()
			got := asked[path]
			mu.Unlock()
			if len(got) != 1 || got[0] != c.want {
				t.Errorf("%s: the server received Accept-Encoding %q, want one request with %q", path, got, c.want)
			}
		}
	}
}

// TestMaxResponseHeaderBytes: a response header section beyond
// MaxResponseHeaderBytes fails the call, over HTTP/1.1 and HTTP/2, and
// the request is not sent again; within the default (10 MiB) the same
// response is delivered. The server counts each request.
func TestMaxResponseHeaderBytes(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	plain, secure, trust := fieldServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path]++
		mu.Unlock()
		w.Header().Set("X-Big", strings.Repeat("b", 8<<10))
		io.WriteString(w, "ok")
	}))
	for _, c := range []struct {
		name  string
		limit int64
		fails bool
	}{{"4KiB", 4 << 10, true}, {"default", 0, false}} {
		tr := replaysafe.New(replaysafe.Options{IgnoreProxyEnvironment: true, TLSClientConfig: trust.Clone(), MaxResponseHeaderBytes: c.limit})
		t.Cleanup(tr.CloseIdleConnections)
		for _, base := range []string{plain, secure} {
			path := "/" + c.name + "/" + base[:strings.Index(base, ":")]
			req, _ := http.NewRequest("GET", base+path, nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			if (err != nil) != c.fails {
				t.Errorf("%s: error %v, want failure %v", path, err, c.fails)
			}
			mu.Lock()
			n := got[path]
			mu.Unlock()
			if n != 1 {
				t.Errorf("%s: the server received %d copies, want 1", path, n)
			}
		}
	}
}

// TestFromTransportMigrates: a Transport made from an http.Transport's
// settings behaves as that http.Transport is configured, counted at the
// servers: its dialer makes every connection, its TLS configuration is
// trusted, DisableKeepAlives gives each request a connection of its own
// with "Connection: close", ForceAttemptHTTP2 speaks HTTP/2 despite the
// custom dialer, an empty TLSNextProto (net/http's way of turning HTTP/2
// off) keeps HTTP/1.1, and its Proxy sends https through a CONNECT.
func TestFromTransportMigrates(t *testing.T) {
	var mu sync.Mutex
	type seen struct {
		proto  int
		closes bool
	}
	got := map[string][]seen{}
	var conns atomic.Int32
	h := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], seen{r.ProtoMajor, r.Close})
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	h.EnableHTTP2 = true
	h.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	h.StartTLS()
	t.Cleanup(h.Close)
	trust := h.Client().Transport.(*http.Transport).TLSClientConfig
	var dials atomic.Int32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	rec := &alikeServers{requests: map[string][]*http.Request{}, conns: map[string]int{}}
	proxyURL, _ := startAlikeProxy(t, rec, dial)
	pu, _ := url.Parse(proxyURL)

	for _, c := range []struct {
		name              string
		ht                *http.Transport
		dials, conns      int32
		proto             int
		connects, through int
	}{
		{"keep-alives off, h2 forced", &http.Transport{DialContext: dial, TLSClientConfig: trust.Clone(), DisableKeepAlives: true, ForceAttemptHTTP2: true},
			2, 2, 2, 0, 0},
		{"custom dialer, h1", &http.Transport{DialContext: dial, TLSClientConfig: trust.Clone()},
			1, 1, 1, 0, 0},
		{"h2 turned off", &http.Transport{DialContext: dial, TLSClientConfig: trust.Clone(), ForceAttemptHTTP2: true,
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}, 1, 1, 1, 0, 0},
		{"proxy", &http.Transport{DialContext: dial, TLSClientConfig: trust.Clone(), Proxy: http.ProxyURL(pu), ForceAttemptHTTP2: true},
			1, 1, 2, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := replaysafe.New(replaysafe.FromTransport(c.ht))
			path := "/" + strings.ReplaceAll(c.name, " ", "-")
			d0, c0, p0 := dials.Load(), conns.Load(), rec.snapshot("")
			for range 2 {
				req, _ := http.NewRequest("GET", h.URL+path, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			tr.CloseIdleConnections()
			mu.Lock()
			reqs := got[path]
			mu.Unlock()
			if len(reqs) != 2 {
				t.Fatalf("the server received %d requests, want 2", len(reqs))
			}
			for _, r := range reqs {
				// HTTP/2 has no Connection: close; net/http's server
				// reports Close for an HTTP/1.1 request that carries it.
				if r.proto != c.proto || r.closes != (c.ht.DisableKeepAlives && c.proto == 1) {
					t.Errorf("request %+v, want HTTP/%d", r, c.proto)
				}
			}
			// A proxied connection is dialed to the proxy, and the proxy
			// dials the origin through the same dialer.
			wantDials := c.dials + int32(c.through)
			if d, n := dials.Load()-d0, conns.Load()-c0; d != wantDials || n != c.conns {
				t.Errorf("%d dials, %d connections at the origin, want %d and %d", d, n, wantDials, c.conns)
			}
			if n := rec.snapshot("").connects - p0.connects; n != c.connects {
				t.Errorf("%d CONNECTs at the proxy, want %d", n, c.connects)
			}
		})
	}
}
