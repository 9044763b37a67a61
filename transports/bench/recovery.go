package bench

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"time"

	"github.com/replaysafe/replaysafe/transports/scripted"
	"github.com/replaysafe/replaysafe/transports/scripted/h2server"
)

// RecoveryServer is a scripted origin that counts what it receives.
type RecoveryServer interface {
	URL() string
	ClientTLSConfig() *tls.Config
	// Count returns the requests (HTTP/1.1) or streams (HTTP/2) received.
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
}

// Recoveries are the stale-connection scenarios.
var Recoveries = []Recovery{
	{
		Name:     "h1-close-crossing",
		Title:    "HTTP/1.1 GET on a kept-alive connection the server closes as the request arrives",
		Protocol: "h1",
		Start: func() (RecoveryServer, error) {
			return scripted.Start(scripted.Config{Default: &scripted.ConnScript{
				Actions: []scripted.Action{scripted.RespondThenCloseOnNext(scripted.CloseFIN)},
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
	r.rt.CloseIdleConnections()
	return r.srv.Close()
}
