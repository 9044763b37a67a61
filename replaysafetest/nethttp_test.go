package replaysafetest

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestNetHTTPClient(t *testing.T) {
	forTransports(t, func(t *testing.T, tr transport) {
		s := start(t, Config{TLS: tr.tls})
		tp := &http.Transport{TLSClientConfig: s.ClientTLSConfig()}
		defer tp.CloseIdleConnections()
		c := &http.Client{Transport: tp, Timeout: 5 * time.Second}
		for range 2 {
			resp, err := c.Post(s.URL()+"/p?x=1", "text/plain", strings.NewReader("body"))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "ok" || resp.StatusCode != 200 || resp.ProtoMajor != 1 {
				t.Errorf("response %v %q", resp.Status, b)
			}
			if tr.tls && resp.TLS.NegotiatedProtocol != "http/1.1" {
				t.Errorf("ALPN %q", resp.TLS.NegotiatedProtocol)
			}
		}
		got := s.Requests()
		if len(got) != 2 || s.Conns() != 1 || got[1].Seq != 1 {
			t.Fatalf("requests %+v, conns %d", got, s.Conns())
		}
		if r := got[0]; r.Method != "POST" || r.Target != "/p?x=1" || string(r.Body) != "body" || r.Header.Get("Host") != s.Addr() {
			t.Errorf("recorded %+v", r)
		}
	})
}

// TestNetHTTPCrossingClose shows what the server is for: counting the
// copies an origin receives when a client retries after a close crossing
// its request. (It pins net/http's current behaviour: replayable requests
// are retried on a new connection, others are not.)
func TestNetHTTPCrossingClose(t *testing.T) {
	for _, tr := range transports {
		for _, mode := range []CloseMode{CloseFIN, CloseRST} {
			for _, method := range []string{"GET", "POST"} {
				t.Run(tr.name+"/"+mode.String()+"/"+method, func(t *testing.T) {
					s := start(t, Config{TLS: tr.tls, Conns: []ConnScript{Script(RespondThenCloseOnNext(mode)), Script(OK())}})
					tp := &http.Transport{TLSClientConfig: s.ClientTLSConfig()}
					defer tp.CloseIdleConnections()
					c := &http.Client{Transport: tp, Timeout: 5 * time.Second}
					resp, err := c.Get(s.URL() + "/a")
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					req, _ := http.NewRequest(method, s.URL()+"/b", strings.NewReader("x"))
					resp, err = c.Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					copies := 0
					for _, r := range s.Requests() {
						if r.Target == "/b" {
							copies++
						}
					}
					wantCopies, wantErr := 2, false
					if method == "POST" {
						wantCopies, wantErr = 1, true
					}
					if copies != wantCopies || (err != nil) != wantErr {
						t.Errorf("origin received %d copies of /b, client error %v; want %d copies, error %v",
							copies, err, wantCopies, wantErr)
					}
					if b := s.RequestsOn(0); len(b) != 2 || b[1].Target != "/b" {
						t.Errorf("conn 0 requests %+v", b)
					}
				})
			}
		}
	}
}
