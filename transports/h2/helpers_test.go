package h2_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/transports/h2"
)

// origin is a net/http HTTP/2 server on 127.0.0.1 (h2c or TLS) that
// counts what it received.
type origin struct {
	t        testing.TB
	addr     string
	tlsCfg   *tls.Config // client config, nil for h2c
	requests atomic.Int64
	bodyIn   atomic.Int64
	close    func()
}

// counted wraps h so that the origin counts requests and body bytes.
func (o *origin) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.requests.Add(1)
		r.Body = &countingBody{ReadCloser: r.Body, n: &o.bodyIn}
		h.ServeHTTP(w, r)
	})
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// newOrigin starts a net/http HTTP/2 server: TLS with ALPN h2, or h2c
// with prior knowledge.
func newOrigin(t testing.TB, useTLS bool, h http.Handler) *origin {
	t.Helper()
	o := &origin{t: t}
	if useTLS {
		ts := httptest.NewUnstartedServer(o.counted(h))
		ts.EnableHTTP2 = true
		ts.StartTLS()
		cfg := ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		cfg.NextProtos = []string{"h2"}
		cfg.ServerName = "example.com"
		o.addr, o.tlsCfg, o.close = ts.Listener.Addr().String(), cfg, ts.Close
	} else {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: o.counted(h), Protocols: new(http.Protocols), ReadHeaderTimeout: 10 * time.Second}
		srv.Protocols.SetUnencryptedHTTP2(true)
		go srv.Serve(ln)
		o.addr, o.close = ln.Addr().String(), func() { srv.Close() }
	}
	// The server stops by itself even if the test hangs.
	var once sync.Once
	stop := o.close
	o.close = func() { once.Do(stop) }
	life := time.AfterFunc(originLifetime, o.close)
	t.Cleanup(func() {
		life.Stop()
		o.close()
	})
	return o
}

// originLifetime bounds how long a test's net/http server runs.
const originLifetime = time.Minute

func (o *origin) url() string {
	if o.tlsCfg != nil {
		return "https://" + o.addr
	}
	return "http://" + o.addr
}

// dial opens a connection to the origin, with the TLS handshake done.
func (o *origin) dial(t testing.TB) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp4", o.addr)
	if err != nil {
		t.Fatal(err)
	}
	if o.tlsCfg == nil {
		return c
	}
	tc := tls.Client(c, o.tlsCfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	return tc
}

// conn opens a ClientConn to the origin, closed at the end of the test.
func (o *origin) conn(t testing.TB, cfg h2.Config) *h2.ClientConn {
	t.Helper()
	cc, err := h2.NewClientConn(o.dial(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		<-cc.Done()
	})
	return cc
}

// do reserves a slot and runs req on cc.
func do(t testing.TB, cc *h2.ClientConn, req *http.Request, ev h2.StreamEvents) (*http.Response, error) {
	t.Helper()
	if !cc.Reserve() {
		t.Fatalf("Reserve failed: %+v", cc.State())
	}
	return cc.RoundTrip(req, ev)
}
