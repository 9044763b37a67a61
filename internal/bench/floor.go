package bench

//lint:file-ignore SA1019 the floor is x/net/http2's own Transport, the HTTP/2 peer; x/net's deprecation points to net/http.

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/internal/adapters/h2"
)

// EvidenceFloor is the HTTP/2 peer with replaysafe's evidence added and
// nothing else: x/net's Transport over connections h2.Observe watches,
// each request followed by an h2.Attempt whose four httptrace hooks
// claim its stream, and let go of when its body is closed. Its events go
// nowhere: no recorder, no state machine, no pool of replaysafe's. Beside
// x/net it prices the evidence the guarantees are decided from; beside
// replaysafe, everything else.
type EvidenceFloor struct {
	*http2.Transport

	mu    sync.Mutex
	wires map[net.Conn]*h2.Wire // by the observed connection x/net holds

	claimed atomic.Int64 // requests whose HEADERS the Wire tied to a stream
}

// NewEvidenceFloor returns an EvidenceFloor speaking h2c with prior
// knowledge, or h2 over TLS with e.TLS.
func NewEvidenceFloor(e Env) *EvidenceFloor {
	f := &EvidenceFloor{wires: make(map[net.Conn]*h2.Wire)}
	f.Transport = &http2.Transport{TLSClientConfig: e.TLS, AllowHTTP: e.TLS == nil}
	f.DialTLSContext = func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
		var c net.Conn
		var err error
		if e.TLS == nil {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
		} else {
			d := tls.Dialer{Config: cfg}
			c, err = d.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		oc, w := h2.Observe(c)
		f.mu.Lock()
		f.wires[oc] = w
		f.mu.Unlock()
		return oc, nil
	}
	return f
}

// Claimed returns how many requests learned their stream ID from the
// Wire: the evidence was gathered, not only paid for.
func (f *EvidenceFloor) Claimed() int64 { return f.claimed.Load() }

// floorAttempt is one request of an EvidenceFloor: the h2.Attempt learns
// its Wire when x/net says which connection the request got (GotConn,
// before x/net's ClientConn.RoundTrip, so before any other hook).
type floorAttempt struct {
	f     *EvidenceFloor
	att   h2.Attempt
	trace *httptrace.ClientTrace
}

func (a *floorAttempt) gotConn(info httptrace.GotConnInfo) {
	a.f.mu.Lock()
	w := a.f.wires[info.Conn]
	a.f.mu.Unlock()
	a.att.Init(w)
}

// Emit counts the request whose first byte was written with its stream
// known.
func (a *floorAttempt) Emit(e fsm.Event) {
	if e.Kind == fsm.EventFirstByteWritten && a.att.Claim().Stream != 0 {
		a.f.claimed.Add(1)
	}
}

// RoundTrip sends req through x/net with the evidence hooks installed.
func (f *EvidenceFloor) RoundTrip(req *http.Request) (*http.Response, error) {
	a := &floorAttempt{f: f}
	a.trace = a.att.Trace(a)
	a.trace.GotConn = a.gotConn
	resp, err := f.Transport.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), a.trace)))
	if err != nil {
		a.att.Done()
		return nil, err
	}
	resp.Body = &floorBody{ReadCloser: resp.Body, a: a}
	return resp, nil
}

// CloseIdleConnections closes x/net's idle connections and forgets the
// Wires of every connection (a benchmark calls it when it is done with
// the client; until then the map holds one entry per dial, and a
// benchmark dials its connections once).
func (f *EvidenceFloor) CloseIdleConnections() {
	f.Transport.CloseIdleConnections()
	f.mu.Lock()
	clear(f.wires)
	f.mu.Unlock()
}

// floorBody ends its attempt when the caller closes it.
type floorBody struct {
	io.ReadCloser
	a    *floorAttempt
	once sync.Once
}

func (b *floorBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.a.att.Done)
	return err
}
