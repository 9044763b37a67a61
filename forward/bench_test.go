package forward_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/forward"
)

// BenchmarkForward measures forwarding over HTTP/1.1 on both sides
// (loopback): replaysafe's forwarder beside httputil.ReverseProxy over
// net/http's Transport, for a GET with a 4 KiB response and a POST with
// a 4 KiB body.
func BenchmarkForward(b *testing.B) {
	payload := strings.Repeat("x", 4<<10)
	proxies := []struct {
		name string
		h    func(u *url.URL) (http.Handler, func())
	}{
		{"replaysafe", func(u *url.URL) (http.Handler, func()) {
			fw := forward.New(forward.Options{Upstream: u})
			return fw, fw.Transport().CloseIdleConnections
		}},
		{"httputil", func(u *url.URL) (http.Handler, func()) {
			rp := httputil.NewSingleHostReverseProxy(u)
			tr := &http.Transport{}
			rp.Transport = tr
			// Without full duplex net/http's server may close the inbound
			// body once the proxy starts the response, while the upload is
			// still finishing; the Transport then drops the upstream
			// connection mid-response. The forwarder enables it itself.
			full := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.NewResponseController(w).EnableFullDuplex()
				rp.ServeHTTP(w, r)
			})
			return full, tr.CloseIdleConnections
		}},
	}
	for _, p := range proxies {
		for _, method := range []string{"GET", "POST"} {
			b.Run(p.name+"/"+method, func(b *testing.B) {
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					io.WriteString(w, payload)
				}))
				defer up.Close()
				u, _ := url.Parse(up.URL)
				h, closeIdle := p.h(u)
				defer closeIdle()
				front := httptest.NewServer(h)
				defer front.Close()
				tr := &http.Transport{}
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr}
				b.SetBytes(int64(len(payload)))
				b.ReportAllocs()
				for b.Loop() {
					var body io.Reader
					if method == "POST" {
						body = strings.NewReader(payload)
					}
					req, _ := http.NewRequest(method, front.URL+"/b", body)
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || n != int64(len(payload)) {
						b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
					}
				}
			})
		}
	}
}
