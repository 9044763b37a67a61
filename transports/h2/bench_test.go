package h2_test

//lint:file-ignore SA1019 x/net's http2.Transport is the peer this connection is measured against (DESIGN.md "Dependencies"); only tests use it.

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/transports/h2"
)

const benchBody = 4 << 10

// benchOrigin answers GET with 4 KiB and POST (after reading the body)
// with "ok".
func benchOrigin(b *testing.B, useTLS bool) *origin {
	payload := bytes.Repeat([]byte("x"), benchBody)
	return newOrigin(b, useTLS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			n, _ := io.Copy(io.Discard, r.Body)
			if n != benchBody {
				w.WriteHeader(400)
				return
			}
			w.Header().Set("Content-Length", "2")
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(payload)))
		w.Write(payload)
	}))
}

// roundTripper is what the benchmark drives: this package's ClientConn
// (through Reserve) or x/net's Transport.
type roundTripper func(*http.Request) (*http.Response, error)

func ours(b *testing.B, o *origin) roundTripper {
	cc := o.conn(b, h2.Config{})
	return func(req *http.Request) (*http.Response, error) {
		if !cc.Reserve() {
			b.Fatal("Reserve failed")
		}
		return cc.RoundTrip(req, nil)
	}
}

func xnet(b *testing.B, o *origin) roundTripper {
	tr := &http2.Transport{TLSClientConfig: o.tlsCfg}
	if o.tlsCfg == nil {
		tr.AllowHTTP = true
		tr.DialTLSContext = func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	b.Cleanup(tr.CloseIdleConnections)
	return tr.RoundTrip
}

func BenchmarkRoundTrip(b *testing.B) {
	post := bytes.Repeat([]byte("y"), benchBody)
	for _, proto := range []string{"h2c", "tls"} {
		for _, method := range []string{"GET", "POST"} {
			for _, par := range []int{1, 64} {
				for _, impl := range []string{"ours", "xnet"} {
					name := proto + "/" + method + "/p" + strconv.Itoa(par) + "/" + impl
					b.Run(name, func(b *testing.B) {
						o := benchOrigin(b, proto == "tls")
						var rt roundTripper
						if impl == "ours" {
							rt = ours(b, o)
						} else {
							rt = xnet(b, o)
						}
						url := o.url() + "/bench"
						// Warm up: the connection and its HPACK tables.
						for range 3 {
							benchOne(b, rt, method, url, post)
						}
						b.ReportAllocs()
						b.SetParallelism(par)
						b.ResetTimer()
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								benchOne(b, rt, method, url, post)
							}
						})
					})
				}
			}
		}
	}
}

func benchOne(b *testing.B, rt roundTripper, method, url string, post []byte) {
	var body io.Reader
	if method == http.MethodPost {
		body = bytes.NewReader(post)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		b.Fatal(err)
	}
	res, err := rt(req)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		b.Fatalf("status %d, %d bytes, %v", res.StatusCode, n, err)
	}
}
