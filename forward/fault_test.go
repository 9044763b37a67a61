package forward_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/forward"
	"github.com/replaysafe/replaysafe/internal/selfsigned"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// upstream is a receipt-counting scripted server behind the forwarder.
type upstream struct {
	url    string
	tls    *tls.Config                // trusts the upstream's certificate; nil over cleartext
	copies func(path string) [][]byte // bodies of the requests for path, in arrival order
	close  func()
}

func h1Upstream(t *testing.T, actions ...replaysafetest.Action) upstream {
	t.Helper()
	s, err := replaysafetest.Start(replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(actions...)}})
	if err != nil {
		t.Fatal(err)
	}
	return upstream{url: s.URL(), close: func() { s.Close() }, copies: func(path string) [][]byte {
		var out [][]byte
		for _, r := range s.Requests() {
			if r.Target == path {
				out = append(out, r.Body)
			}
		}
		return out
	}}
}

func h2Upstream(t *testing.T, streams ...h2server.Action) upstream {
	t.Helper()
	s, err := h2server.New(h2server.Config{
		Conns:   []h2server.ConnScript{{Streams: streams}},
		Default: h2server.Every(h2server.OK("ok")),
	})
	if err != nil {
		t.Fatal(err)
	}
	return upstream{url: s.URL(), close: func() { s.Close() }, copies: func(path string) [][]byte {
		var out [][]byte
		for _, r := range s.Requests() {
			if r.Path == path {
				out = append(out, r.Body)
			}
		}
		return out
	}}
}

func h3Upstream(t *testing.T, streams ...h3server.Action) upstream {
	t.Helper()
	s, err := h3server.New(h3server.Config{
		Conns:   []h3server.ConnScript{{Streams: streams}},
		Default: h3server.Every(h3server.OK("ok")),
	})
	if err != nil {
		t.Fatal(err)
	}
	return upstream{url: s.URL(), tls: s.ClientTLSConfig(), close: func() { s.Close() }, copies: func(path string) [][]byte {
		var out [][]byte
		for _, r := range s.Requests() {
			if r.Path == path {
				out = append(out, r.Body)
			}
		}
		return out
	}}
}

// ingress starts the forwarding handler behind an HTTP/1.1 or an h2c
// (prior knowledge) listener and returns its URL and a client for it.
func ingress(t *testing.T, h http.Handler, proto string) (string, *http.Client) {
	t.Helper()
	if proto == "h3" {
		return h3Ingress(t, h)
	}
	srv := httptest.NewUnstartedServer(h)
	tr := &http.Transport{}
	if proto == "h2" {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetHTTP1(true)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(tr.CloseIdleConnections)
	return srv.URL, &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// h3Ingress serves h over HTTP/3 (quic-go's http3.Server) on a loopback
// UDP port, with a self-signed certificate the returned client trusts.
func h3Ingress(t *testing.T, h http.Handler) (string, *http.Client) {
	t.Helper()
	cert, leaf, err := selfsigned.New("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http3.Server{Handler: h, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}})}
	go srv.Serve(pc)
	t.Cleanup(func() { srv.Close(); pc.Close() })
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(func() { tr.Close() })
	return "https://" + pc.LocalAddr().String(), &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// fault is one scenario: a warm-up request that pools the upstream
// connection, then the request the fault crosses.
type fault struct {
	name    string
	egress  forward.Egress
	method  string
	body    string
	start   func(t *testing.T) upstream
	copies  int // copies of the faulted request the upstream must receive through replaysafe
	status  int // status the client must get through replaysafe
	ruleHdr bool
	// headersOnly: the upstream acts on the header section, before the
	// body arrives.
	headersOnly bool
}

var faults = []fault{
	{"close crossing idempotent GET", forward.EgressHTTP1, "GET", "", func(t *testing.T) upstream {
		return h1Upstream(t, replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN))
	}, 2, 200, false, false},
	{"close crossing POST", forward.EgressHTTP1, "POST", "hello", func(t *testing.T) upstream {
		return h1Upstream(t, replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN))
	}, 1, 502, true, false},
	{"close crossing PUT", forward.EgressHTTP1, "PUT", "hello", func(t *testing.T) upstream {
		return h1Upstream(t, replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN))
	}, 1, 502, true, false},
	{"1xx then close, GET", forward.EgressHTTP1, "GET", "", func(t *testing.T) upstream {
		return h1Upstream(t, replaysafetest.OK(), replaysafetest.Interim100(replaysafetest.CloseFIN))
	}, 1, 502, true, false},
	{"h2 GOAWAY below the stream, GET", forward.EgressHTTP2, "GET", "", func(t *testing.T) upstream {
		return h2Upstream(t, h2server.OK("first"), h2server.GoAwayBelow())
	}, 2, 200, false, true},
	{"h2 REFUSED_STREAM, GET", forward.EgressHTTP2, "GET", "", func(t *testing.T) upstream {
		return h2Upstream(t, h2server.OK("first"), h2server.Refuse())
	}, 2, 200, false, true},
	// The server answers once the whole body has arrived, so the stack
	// has sent the one-shot body (RS11): the forwarder kept none to
	// resend. (Answered on the HEADERS alone, the body may still be
	// unread, and then it is resent: a race either way safe.)
	{"h2 REFUSED_STREAM, POST", forward.EgressHTTP2, "POST", "hello", func(t *testing.T) upstream {
		return h2Upstream(t, h2server.OK("first"), h2server.RefuseAfterBody())
	}, 1, 502, true, true},
	{"h2 GOAWAY below the stream, POST", forward.EgressHTTP2, "POST", "hello", func(t *testing.T) upstream {
		return h2Upstream(t, h2server.OK("first"), h2server.GoAwayBelow().WithAt(h2server.AfterBody))
	}, 1, 502, true, true},
	{"h3 H3_REQUEST_REJECTED, GET", forward.EgressHTTP3, "GET", "", func(t *testing.T) upstream {
		return h3Upstream(t, h3server.OK("first"), h3server.Reject())
	}, 2, 200, false, true},
	{"h3 GOAWAY rejecting the stream, GET", forward.EgressHTTP3, "GET", "", func(t *testing.T) upstream {
		return h3Upstream(t, h3server.OK("first"), h3server.GoAwayRejecting().WithClose())
	}, 2, 200, false, true},
	// replaysafe starts a one-shot body on a new HTTP/3 connection (quic-go
	// cannot hand it back unsent), so the close on the pooled one never
	// meets it.
	{"h3 close on the pooled connection, POST", forward.EgressHTTP3, "POST", "hello", func(t *testing.T) upstream {
		return h3Upstream(t, h3server.OK("first"), h3server.CloseConnAfterBody())
	}, 1, 200, false, false},
	{"h2 close crossing idempotent GET", forward.EgressHTTP2, "GET", "", func(t *testing.T) upstream {
		return h2Upstream(t, h2server.OK("first"), h2server.CloseConn())
	}, 2, 200, false, false},
	{"h2 close crossing POST", forward.EgressHTTP2, "POST", "hello", func(t *testing.T) upstream {
		return h2Upstream(t, h2server.OK("first"), h2server.CloseConnAfterBody())
	}, 1, 502, true, false},
	// After a 1xx nothing is resent (RS07): the server read the request.
	{"h2 1xx then close, GET", forward.EgressHTTP2, "GET", "", func(t *testing.T) upstream {
		return h2Upstream(t, h2server.OK("first"), h2server.CloseConn().WithInformational(103, nil))
	}, 1, 502, true, false},
	{"h3 1xx then close, GET", forward.EgressHTTP3, "GET", "", func(t *testing.T) upstream {
		// The close comes 50 ms after the 103, so that it cannot overtake
		// it: a CONNECTION_CLOSE discards stream data the client has not
		// read, and a 103 the client never saw is no evidence.
		return h3Upstream(t, h3server.OK("first"), h3server.Hang(50*time.Millisecond).WithInformational(103, nil))
	}, 1, 502, true, false},
}

// outcome is what one forwarder did with one fault.
type outcome struct {
	copies int
	status int
	rule   string
}

func (o outcome) String() string {
	s := fmt.Sprintf("%d cop%s, %d", o.copies, map[bool]string{true: "y", false: "ies"}[o.copies == 1], o.status)
	if o.rule != "" {
		s += " " + o.rule
	}
	return s
}

// run sends the warm-up and the faulted request through h and counts what
// the upstream received.
func run(t *testing.T, f fault, up upstream, h http.Handler, ingressProto string) outcome {
	t.Helper()
	base, client := ingress(t, h, ingressProto)
	resp, err := client.Get(base + "/warm")
	if err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("warm-up status %d", resp.StatusCode)
	}
	var body io.Reader
	if f.body != "" {
		body = strings.NewReader(f.body)
	}
	req, _ := http.NewRequest(f.method, base+"/x", body)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatalf("faulted request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	copies := up.copies("/x")
	for i, c := range copies {
		// A stream refused or cut at its header section was recorded
		// before its body: only the copies read in full carry it.
		if !bytes.Equal(c, []byte(f.body)) && !f.headersOnly {
			t.Errorf("copy %d has body %q, want %q", i, c, f.body)
		}
		if !bytes.Equal(c, copies[0]) {
			t.Errorf("copy %d has body %q, copy 0 %q: not identical", i, c, copies[0])
		}
	}
	return outcome{copies: len(copies), status: resp.StatusCode, rule: resp.Header.Get(forward.RuleHeader)}
}

// netHTTPTransport is net/http's Transport speaking egress e (quic-go's
// http3.Transport for HTTP/3), for httputil.ReverseProxy, and its close.
func netHTTPTransport(e forward.Egress, tlsConf *tls.Config) (http.RoundTripper, func()) {
	if e == forward.EgressHTTP3 {
		tr := &http3.Transport{TLSClientConfig: tlsConf}
		return tr, func() { tr.Close() }
	}
	tr := &http.Transport{TLSClientConfig: tlsConf}
	if e == forward.EgressHTTP2 {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return tr, tr.CloseIdleConnections
}

var (
	comparisonMu sync.Mutex
	comparison   []string
)

// TestForwardFaultsReceiptCounted runs every fault over HTTP/1.1 and h2c ingress
// through the forwarder, counting the copies the upstream received, and
// beside it httputil.ReverseProxy over net/http's Transport on the same
// fault; it prints the comparison table (docs/forwarding.md).
func TestForwardFaultsReceiptCounted(t *testing.T) {
	for _, f := range faults {
		for _, in := range []string{"h1", "h2", "h3"} {
			pair := fmt.Sprintf("%s→%s", in, f.egress)
			t.Run(pair+" "+f.name, func(t *testing.T) {
				up := f.start(t)
				defer up.close()
				u, _ := url.Parse(up.url)
				logs := &lineWriter{lines: make(chan string, 4)}
				fw := forward.New(forward.Options{Upstream: u, Egress: f.egress,
					TransportOptions: replaysafe.Options{AcquireTimeout: 5 * time.Second, TLSClientConfig: up.tls},
					Logger:           slog.New(slog.NewTextHandler(logs, nil))})
				defer fw.Transport().CloseIdleConnections()
				got := run(t, f, up, fw, in)
				if got.copies != f.copies || got.status != f.status {
					t.Errorf("replaysafe forward: %v, want %d copies and %d", got, f.copies, f.status)
				}
				if f.ruleHdr != (got.rule != "") {
					t.Errorf("%s header %q, want one: %v", forward.RuleHeader, got.rule, f.ruleHdr)
				}
				// The access log line of the faulted request counts the
				// wire attempts: one per copy the upstream received.
				for range 2 {
					select {
					case line := <-logs.lines:
						if strings.Contains(line, "target=/x") && !strings.Contains(line, fmt.Sprintf("attempts=%d ", f.copies)) {
							t.Errorf("access log %q, want attempts=%d", line, f.copies)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("no access log line")
					}
				}

				up2 := f.start(t)
				defer up2.close()
				u2, _ := url.Parse(up2.url)
				rp := httputil.NewSingleHostReverseProxy(u2)
				tr, closeTr := netHTTPTransport(f.egress, up2.tls)
				defer closeTr()
				rp.Transport = tr
				rp.ErrorLog = nil
				rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(http.StatusBadGateway) }
				ref := run(t, f, up2, rp, in)
				if ref.copies < 1 {
					t.Errorf("httputil.ReverseProxy: the upstream received no copy")
				}
				comparisonMu.Lock()
				comparison = append(comparison, fmt.Sprintf("| %s | %s | %s | %s |", pair, f.name, got, ref))
				comparisonMu.Unlock()
			})
		}
	}
	if os.Getenv("FORWARD_TABLE") != "" || testing.Verbose() {
		fmt.Println("| ingress→egress | fault | replaysafe forward | httputil.ReverseProxy + net/http |")
		fmt.Println("|---|---|---|---|")
		for _, row := range comparison {
			fmt.Println(row)
		}
	}
}
