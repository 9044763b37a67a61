package replaysafe_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/replaysafetest/h3early"
)

// BenchmarkEarlyDataFirstRequest measures the first request on a new
// HTTP/3 connection that resumes a session, over a loopback whose relay
// adds 5 ms each way (a 10 ms round trip): with EarlyData the GET goes in
// 0-RTT beside the handshake, without it the GET waits the handshake's
// round trip. quic-go's http3.Transport with MethodGet0RTT (0-RTT by
// the caller's own choice, with no rule behind it) runs beside them as
// the peer. Each iteration makes one call of each, in turn, on
// Transports that share nothing, and the benchmark reports the means and
// the ratios (early/handshake: one round trip saved of two shows as
// about 0.5).
func BenchmarkEarlyDataFirstRequest(b *testing.B) {
	s, err := h3early.New(h3early.Config{Delay: 5 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	client := func(early bool) *replaysafe.Transport {
		tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP3, TLSClientConfig: s.ClientTLSConfig(), EarlyData: early})
		benchGet(b, tr, s.URL()+"/prime") // the session ticket
		tr.CloseIdleConnections()
		return tr
	}
	withEarly, without := client(true), client(false)
	defer withEarly.CloseIdleConnections()
	defer without.CloseIdleConnections()
	peerTLS := s.ClientTLSConfig()
	peerTLS.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	peer := &http3.Transport{TLSClientConfig: peerTLS}
	defer peer.Close()
	benchGet(b, peer, s.URL()+"/prime")
	peer.CloseIdleConnections()
	var early, plain, quicGo time.Duration
	for i := 0; b.Loop(); i++ {
		for _, c := range []struct {
			tr interface {
				RoundTrip(*http.Request) (*http.Response, error)
				CloseIdleConnections()
			}
			method string
			sum    *time.Duration
		}{{withEarly, http.MethodGet, &early}, {without, http.MethodGet, &plain}, {peer, http3.MethodGet0RTT, &quicGo}} {
			start := time.Now()
			benchDo(b, c.tr, c.method, s.URL()+"/first")
			*c.sum += time.Since(start)
			c.tr.CloseIdleConnections() // the next call dials and resumes
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(early.Microseconds())/n/1000, "early-ms")
	b.ReportMetric(float64(plain.Microseconds())/n/1000, "handshake-ms")
	b.ReportMetric(float64(quicGo.Microseconds())/n/1000, "quic-go-0rtt-ms")
	b.ReportMetric(float64(early)/float64(plain), "early/handshake")
	b.ReportMetric(float64(early)/float64(quicGo), "early/quic-go")
	var inEarly int
	for _, r := range s.Copies("/first") {
		if r.Early {
			inEarly++
		}
	}
	b.ReportMetric(float64(inEarly)/n, "early-copies/op") // 2: every EarlyData and quic-go call went in 0-RTT
}

func benchGet(b *testing.B, tr http.RoundTripper, url string) { benchDo(b, tr, http.MethodGet, url) }

func benchDo(b *testing.B, tr http.RoundTripper, method, url string) {
	req, _ := http.NewRequest(method, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
}
