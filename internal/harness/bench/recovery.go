package bench

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// RecoveryServer is a scripted origin that counts what it receives.
type RecoveryServer interface {
	URL() string
	ClientTLSConfig() *tls.Config
	// Count returns the requests (HTTP/1.1) or streams (HTTP/2, HTTP/3)
	// received.
	Count() int
	Close() error
}

// Recovery is a stale-connection scenario: every call first warms a new
// connection up with one request (untimed), then sends the timed call on
// it, whose first attempt the server defeats; the client must recover.
type Recovery struct {
	// Name is the scenario's part of benchmark names.
	Name string
	// Title says what happens.
	Title string
	// Protocol names the entry of Protocols whose clients take part.
	Protocol string
	// Start starts the scripted server; every connection it accepts
	// answers its first request and defeats its second.
	Start func() (RecoveryServer, error)
	// Copies is what the server must receive per call, the warm-up
	// included: a benchmark whose count differs fails.
	Copies int
	// Failing maps the clients that cannot recover from the scenario to
	// the copies the server must receive per call when their call fails
	// (the warm-up and the one attempt: 2). The benchmark measures the
	// other clients only, so that its row has no peer to compare with;
	// TestRecoveriesCountCopies checks that these clients fail so.
	Failing map[string]int
}

// Fails reports whether client cannot recover from r, and the copies the
// server must then receive per call.
func (r Recovery) Fails(client string) (int, bool) {
	copies, ok := r.Failing[client]
	return copies, ok
}

// Recoveries are the stale-connection scenarios.
var Recoveries = []Recovery{
	{
		Name:     "h1-close-crossing",
		Title:    "HTTP/1.1 GET on a kept-alive connection the server closes as the request arrives",
		Protocol: "h1",
		Start: func() (RecoveryServer, error) {
			return replaysafetest.Start(replaysafetest.Config{Default: &replaysafetest.ConnScript{
				Actions: []replaysafetest.Action{replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)},
			}})
		},
		Copies: 3, // warm-up, the defeated attempt, the resend
	},
	{
		Name:     "h2-refused-stream",
		Title:    "HTTP/2 GET refused with REFUSED_STREAM on a kept-alive connection",
		Protocol: "h2",
		Start:    h2Recovery(h2server.Refuse()),
		Copies:   3,
	},
	{
		Name:     "h2-goaway",
		Title:    "HTTP/2 GET answered by a GOAWAY whose last stream ID is below it",
		Protocol: "h2",
		Start:    h2Recovery(h2server.GoAwayBelow()),
		Copies:   3,
	},
	{
		Name:     "h3-request-rejected",
		Title:    "HTTP/3 GET reset with H3_REQUEST_REJECTED on a kept-alive connection",
		Protocol: "h3",
		Start:    h3Recovery(h3server.Reject()),
		Copies:   3,
	},
	{
		Name:     "h3-goaway",
		Title:    "HTTP/3 GET met by a GOAWAY carrying its own stream ID, then reset with H3_REQUEST_REJECTED",
		Protocol: "h3",
		Start:    h3Recovery(h3server.GoAwayRejecting()),
		Copies:   3,
	},
	{
		Name:     "h3-goaway-close",
		Title:    "HTTP/3 GET met by a GOAWAY carrying its own stream ID, then the connection closes (50 ms later)",
		Protocol: "h3",
		// h3server waits DefaultGoAwayCloseDelay between the GOAWAY and
		// the CONNECTION_CLOSE: closing at once would usually discard the
		// GOAWAY still unsent, and the call would meet a bare close.
		Start:   h3Recovery(h3server.GoAwayRejecting().WithClose()),
		Copies:  3,
		Failing: map[string]int{QuicGoHTTP3: 2}, // the stream fails with the close: no H3_REQUEST_REJECTED, no retry
	},
	{
		Name:     "h3-close-crossing",
		Title:    "HTTP/3 GET on a kept-alive connection the server closes once the request arrived, unanswered",
		Protocol: "h3",
		Start:    h3Recovery(h3server.CloseConnAfterBody()),
		Copies:   3,
		Failing:  map[string]int{QuicGoHTTP3: 2},
	},
}

// h3RecoveryIdle is the QUIC idle timeout of the HTTP/3 recovery
// servers. quic-go's http3.Transport drops a connection from its cache
// after a failed request without closing it; this bounds how long such
// connections pile up over a benchmark's iterations.
const h3RecoveryIdle = 2 * time.Second

// h3Recovery starts an h3server whose every connection answers its first
// request stream and meets its second with defeat.
func h3Recovery(defeat h3server.Action) func() (RecoveryServer, error) {
	return func() (RecoveryServer, error) {
		return h3server.New(h3server.Config{
			Default:     &h3server.ConnScript{Streams: []h3server.Action{h3server.OK("ok"), defeat}},
			IdleTimeout: h3RecoveryIdle,
			Lifetime:    time.Hour,
		})
	}
}

// h2Recovery starts an h2c scripted server whose every connection answers
// its first stream and meets its second with defeat.
func h2Recovery(defeat h2server.Action) func() (RecoveryServer, error) {
	return func() (RecoveryServer, error) {
		return h2server.New(h2server.Config{
			Default:  &h2server.ConnScript{Streams: []h2server.Action{h2server.OK("ok"), defeat}},
			Lifetime: time.Hour,
		})
	}
}

// ProtocolNamed returns the entry of Protocols called name.
func ProtocolNamed(name string) (Protocol, bool) {
	for _, p := range Protocols {
		if p.Name == name {
			return p, true
		}
	}
	return Protocol{}, false
}

// RecoveryRun is one client's run of a scenario.
type RecoveryRun struct {
	srv RecoveryServer
	rt  RoundTripper
	u   *url.URL
	req Workload
	n   int // calls made
}

// StartRecovery starts r's server and c's client.
func StartRecovery(r Recovery, c Client) (*RecoveryRun, error) {
	srv, err := r.Start()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(srv.URL())
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &RecoveryRun{srv: srv, rt: c.New(Env{TLS: srv.ClientTLSConfig(), MaxIdle: 2}), u: u, req: Workloads[0]}, nil
}

// Warm drops the client's idle connections and warms a new one up: the
// next call goes on it and meets the server's defeat.
func (r *RecoveryRun) Warm() error {
	r.rt.CloseIdleConnections()
	return Do(r.rt, NewRequest(r.u, r.req))
}

// Call makes the call that must recover.
func (r *RecoveryRun) Call() error {
	r.n++
	return Do(r.rt, NewRequest(r.u, r.req))
}

// Check returns an error unless the server received copies per call.
func (r *RecoveryRun) Check(copies int) error {
	if got, want := r.srv.Count(), copies*r.n; got != want {
		return fmt.Errorf("bench: the server received %d copies over %d calls, want %d (%d per call)", got, r.n, want, copies)
	}
	return nil
}

// Close stops the client and the server.
func (r *RecoveryRun) Close() error {
	Release(r.rt)
	return r.srv.Close()
}
