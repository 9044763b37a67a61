package conformance

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// QuicGoHTTP3 is quic-go's http3.Transport: its RoundTrip, with its own
// connection cache and its retry of a request its cached connection could
// not take.
const QuicGoHTTP3 = "quic-go/http3"

// H3Clients lists the clients of the HTTP/3 cases in table order.
var H3Clients = []string{Replaysafe, QuicGoHTTP3}

// H3Network is the network name of every HTTP/3 case: QUIC over loopback
// UDP, TLS 1.3 with ALPN "h3".
const H3Network = "h3"

// H3Scenario is one HTTP/3 fault, scripted stream by stream at an
// h3server and driven at the client.
type H3Scenario struct {
	// ID names the scenario in case names ("h3-post-rejected").
	ID string
	// Title says what happens, in words.
	Title string
	// Config returns the server's scripts.
	Config func() h3server.Config
	// Run drives the client and returns the target request's result.
	Run func(env *StreamEnv) (Result, error)
	// Want is the expected outcome per client; the peer's is what it was
	// measured to do, and is checked too.
	Want map[string]Want
}

// Name is "scenario-id/h3".
func (s H3Scenario) Name() string { return s.ID + "/" + H3Network }

// h3Conns scripts the first connections stream by stream; later ones
// answer 200.
func h3Conns(scripts ...[]h3server.Action) func() h3server.Config {
	return func() h3server.Config {
		var cfg h3server.Config
		for _, s := range scripts {
			cfg.Conns = append(cfg.Conns, h3server.ConnScript{Streams: s})
		}
		return cfg
	}
}

// H3Scenarios returns the HTTP/3 fault scenarios, in table order.
func H3Scenarios() []H3Scenario {
	warm := h3server.OK("ok")
	return []H3Scenario{
		{
			ID: "h3-post-rejected", Title: "HTTP/3 POST rejected (H3_REQUEST_REJECTED)",
			Config: h3Conns([]h3server.Action{h3server.Reject()}),
			Run:    targetStream(http.MethodPost, Buffered),
			Want: map[string]Want{
				Replaysafe:  {ok200, "RS15,RS02", 2},
				QuicGoHTTP3: {ok200, "", 2},
			},
		},
		{
			ID: "h3-oneshot-rejected-after-body", Title: "HTTP/3 POST with a one-shot body rejected after the body was sent",
			Config: h3Conns([]h3server.Action{h3server.RejectAfterBody()}),
			Run:    targetStream(http.MethodPost, OneShot),
			Want: map[string]Want{
				Replaysafe:  {fails, "RS11", 1},
				QuicGoHTTP3: {fails, "", 1},
			},
		},
		{
			ID: "h3-post-goaway-rejecting", Title: "HTTP/3 POST at a GOAWAY's stream ID, then the connection closes",
			Config: h3Conns([]h3server.Action{warm, h3server.GoAwayRejecting().WithClose()}),
			Run:    warmThenStream(http.MethodPost, Buffered),
			Want: map[string]Want{
				Replaysafe:  {ok200, "RS14,RS02", 2},
				QuicGoHTTP3: {fails, "", 1},
			},
		},
		{
			ID: "h3-post-goaway-after", Title: "HTTP/3 POST below a GOAWAY's stream ID, then the connection closes",
			Config: h3Conns([]h3server.Action{warm, h3server.GoAway(8).WithClose()}),
			Run:    warmThenStream(http.MethodPost, Buffered),
			Want: map[string]Want{
				Replaysafe:  {fails, "RS18", 1},
				QuicGoHTTP3: {fails, "", 1},
			},
		},
		{
			ID: "h3-get-goaway-after", Title: "HTTP/3 GET below a GOAWAY's stream ID, then the connection closes",
			Config: h3Conns([]h3server.Action{warm, h3server.GoAway(8).WithClose()}),
			Run:    warmThenStream(http.MethodGet, NoBody),
			Want: map[string]Want{
				Replaysafe:  {ok200, "RS20,RS02", 2},
				QuicGoHTTP3: {fails, "", 1},
			},
		},
		{
			ID: "h3-get-close-crossing", Title: "HTTP/3 GET, the connection closes as the request arrives",
			Config: h3Conns([]h3server.Action{warm, h3server.CloseConnAfterBody()}),
			Run:    warmThenStream(http.MethodGet, NoBody),
			Want: map[string]Want{
				Replaysafe:  {ok200, "RS20,RS02", 2},
				QuicGoHTTP3: {fails, "", 1},
			},
		},
		{
			ID: "h3-post-close-crossing", Title: "HTTP/3 POST, the connection closes as the request arrives",
			Config: h3Conns([]h3server.Action{warm, h3server.CloseConnAfterBody()}),
			Run:    warmThenStream(http.MethodPost, Buffered),
			Want: map[string]Want{
				Replaysafe:  {fails, "RS18", 1},
				QuicGoHTTP3: {fails, "", 1},
			},
		},
		{
			ID: "h3-post-reset", Title: "HTTP/3 POST reset with H3_INTERNAL_ERROR after the request was read",
			Config: h3Conns([]h3server.Action{warm, h3server.Reset(http3.ErrCodeInternalError)}),
			Run:    warmThenStream(http.MethodPost, Buffered),
			Want: map[string]Want{
				Replaysafe:  {fails, "RS18", 1},
				QuicGoHTTP3: {fails, "", 1},
			},
		},
		{
			ID: "h3-put-reset", Title: "HTTP/3 PUT reset with H3_INTERNAL_ERROR after the request was read",
			Config: h3Conns([]h3server.Action{warm, h3server.Reset(http3.ErrCodeInternalError)}),
			Run:    warmThenStream(http.MethodPut, Buffered),
			Want: map[string]Want{
				Replaysafe:  {ok200, "RS20,RS02", 2},
				QuicGoHTTP3: {fails, "", 1},
			},
		},
		{
			ID: "h3-reject-everything", Title: "HTTP/3 POST, the server rejects every request",
			Config: func() h3server.Config { return h3server.Config{Default: h3server.Every(h3server.Reject())} },
			Run:    targetStream(http.MethodPost, Buffered),
			Want: map[string]Want{
				Replaysafe:  {fails, "RS15,RS08", 2},
				QuicGoHTTP3: {fails, "", 2},
			},
		},
	}
}

// RunH3Once runs s once against client with a fresh server and client.
func RunH3Once(s H3Scenario, client string) (Run, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	srv, err := h3server.New(s.Config())
	if err != nil {
		return Run{Setup: err}, 0
	}
	env := &StreamEnv{URL: srv.URL(), ctx: ctx}
	var rules targetRules
	var closeIdle func()
	switch client {
	case Replaysafe:
		tr := replaysafe.New(replaysafe.Options{
			Protocol:        replaysafe.ProtocolHTTP3,
			TLSClientConfig: srv.ClientTLSConfig(),
			Observer:        rules.observer(),
		})
		env.Client, closeIdle = tr, tr.CloseIdleConnections
	case QuicGoHTTP3:
		tr := &http3.Transport{TLSClientConfig: srv.ClientTLSConfig()}
		env.Client, closeIdle = tr, func() { tr.Close() }
	default:
		srv.Close()
		return Run{Setup: fmt.Errorf("conformance: unknown HTTP/3 client %q", client)}, 0
	}

	res, setup := s.Run(env)
	receipts := func() []receipt {
		var got []receipt
		for _, q := range srv.Requests() {
			got = append(got, receipt{path: q.Path, method: q.Method, body: q.Body})
		}
		return got
	}
	return streamRun(res, setup, closeIdle, srv.Close, receipts, &rules), env.elapsed
}

// RunH3Case runs s n times against client.
func RunH3Case(s H3Scenario, client string, n int) Report {
	want, checked := s.Want[client]
	return runStreamCase(s.Name(), s.Title, H3Network, client, want, checked, 0, n,
		func() (Run, time.Duration) { return RunH3Once(s, client) })
}

// RunAllH3 runs every HTTP/3 scenario against every HTTP/3 client n
// times, several at once, and returns the reports in table order.
func RunAllH3(scenarios []H3Scenario, n int) []Report {
	var jobs []func() Report
	for _, s := range scenarios {
		for _, cl := range H3Clients {
			jobs = append(jobs, func() Report { return RunH3Case(s, cl, n) })
		}
	}
	return runJobs(jobs)
}
