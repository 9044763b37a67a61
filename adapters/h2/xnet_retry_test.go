package h2_test

//lint:file-ignore SA1019 replaysafe drives x/net/http2 directly (ClientConn, GoAwayError) so that x/net's own retry loop never runs; DESIGN.md "Dependencies" chose it, and x/net's deprecation points to net/http, which would bring that loop back.

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
)

// oneShot is a body x/net cannot rewind: no GetBody, unknown length.
type oneShot struct{ r io.Reader }

func (o *oneShot) Read(p []byte) (int, error) { return o.r.Read(p) }

// TestXNetTransportAgainstRefuseEverything measures what x/net's own
// http2.Transport (its RoundTrip, with the retry loop replaysafe replaces)
// does against a server that answers every stream with
// RST_STREAM(REFUSED_STREAM): how many copies the server receives and how
// long the backoff sleeps between them last.
//
// By default the request runs under an 8 s deadline; set
// REPLAYSAFE_H2_MEASURE=full to let the loop run to its end (about 63 s).
//
// Reading of transport_common.go (x/net v0.62.0), confirmed here: the
// first retry is immediate, the next ones sleep 1, 2, 4, 8, 16 and 32 s
// plus up to 10% jitter that is truncated to whole seconds by
// time.Duration (so 16–17 s and 32–35 s for the last two), and after the
// seventh retry the REFUSED_STREAM error is returned: 8 copies in 63 to
// 67 s, all on the same connection since a refused stream leaves it
// usable. A body without GetBody is never retried, even though the server
// refused the stream before reading any of it.
func TestXNetTransportAgainstRefuseEverything(t *testing.T) {
	budget := 8 * time.Second
	wantCopies, wantGaps := 5, []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second}
	full := os.Getenv("REPLAYSAFE_H2_MEASURE") == "full"
	if full {
		budget = 90 * time.Second
		wantCopies = 8
		wantGaps = append(wantGaps, 8*time.Second, 16*time.Second, 32*time.Second)
	}
	for _, tc := range []struct {
		name   string
		method string
		body   func() io.Reader
		copies int // 0: wantCopies
	}{
		{name: "GET", method: "GET"},
		{name: "POST-with-GetBody", method: "POST", body: func() io.Reader { return strings.NewReader("payload") }},
		{name: "POST-one-shot-body", method: "POST", body: func() io.Reader { return &oneShot{strings.NewReader("payload")} }, copies: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, h2server.Config{
				Default:     h2server.Every(h2server.Refuse()),
				IdleTimeout: budget + 10*time.Second, // never close under the client's sleeps
				Lifetime:    budget + 20*time.Second,
			})
			tr := &http2.Transport{
				AllowHTTP: true,
				DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, addr)
				},
			}
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			var body io.Reader
			if tc.body != nil {
				body = tc.body()
			}
			req, err := http.NewRequestWithContext(ctx, tc.method, s.URL()+"/refused", body)
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			res, err := tr.RoundTrip(req)
			elapsed := time.Since(began)
			if err == nil {
				res.Body.Close()
				t.Fatal("RoundTrip succeeded against a server that refuses everything")
			}
			rs := s.Requests()
			var offsets, gaps []time.Duration
			for i, r := range rs {
				offsets = append(offsets, r.At.Sub(began).Round(10*time.Millisecond))
				if i > 0 {
					gaps = append(gaps, r.At.Sub(rs[i-1].At))
				}
				if r.Conn != 0 || r.StreamID != uint32(2*i+1) {
					t.Errorf("copy %d on conn %d stream %d", i, r.Conn, r.StreamID)
				}
			}
			t.Logf("%s: %d copies in %v (budget %v); arrivals at %v; final error: %v",
				tc.name, len(rs), elapsed.Round(10*time.Millisecond), budget, offsets, err)

			want := tc.copies
			if want == 0 {
				want = wantCopies
			}
			if len(rs) != want {
				t.Fatalf("%d copies, want %d", len(rs), want)
			}
			if want == 1 {
				var se http2.StreamError
				if errors.As(err, &se) {
					t.Errorf("one-shot body: got the bare stream error %v", err)
				}
				return
			}
			for i, g := range gaps {
				// The jitter adds up to 10%, truncated to whole seconds.
				lo, hi := wantGaps[i]-50*time.Millisecond, wantGaps[i]+(wantGaps[i]/10).Truncate(time.Second)+600*time.Millisecond
				if g < lo || g > hi {
					t.Errorf("gap %d: %v, want %v to %v", i, g, lo, hi)
				}
			}
			var se http2.StreamError
			switch {
			case full && !(errors.As(err, &se) && se.Code == http2.ErrCodeRefusedStream):
				t.Errorf("final error %v, want REFUSED_STREAM", err)
			case !full && !errors.Is(err, context.DeadlineExceeded):
				t.Errorf("final error %v, want the deadline", err)
			}
		})
	}
}
