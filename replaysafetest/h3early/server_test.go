package h3early

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// client returns quic-go's Transport with a session cache, primed: one
// request answered on a first connection, then closed, so that the next
// connection resumes and may send 0-RTT.
func client(t *testing.T, s *Server) *http3.Transport {
	t.Helper()
	cfg := s.ClientTLSConfig()
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	tr := &http3.Transport{TLSClientConfig: cfg}
	t.Cleanup(func() { tr.Close() })
	if _, err := do(tr, http.MethodGet, s.URL()+"/prime"); err != nil {
		t.Fatal(err)
	}
	tr.CloseIdleConnections()
	return tr
}

func do(tr http.RoundTripper, method, url string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func start(t *testing.T) *Server {
	t.Helper()
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestEarlyRecorded: a 0-RTT GET is recorded as early, a plain one is
// not, each on its connection.
func TestEarlyRecorded(t *testing.T) {
	s := start(t)
	tr := client(t, s)
	if code, err := do(tr, http3.MethodGet0RTT, s.URL()+"/early"); err != nil || code != 200 {
		t.Fatalf("0-RTT GET: %d %v", code, err)
	}
	if got := s.Copies("/early"); len(got) != 1 || !got[0].Early || got[0].Conn != 1 {
		t.Fatalf("recorded %+v, want one early copy on connection 1", got)
	}
	if got := s.Copies("/prime"); len(got) != 1 || got[0].Early || got[0].Conn != 0 {
		t.Fatalf("recorded %+v, want the priming request after the handshake", got)
	}
	if n := s.Accepted(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestRejectAndTooEarly: with Reject the early data never reaches the
// handler (quic-go's client reports Err0RTTRejected); with TooEarly the
// handler answers it 425 and the receipt says unprocessed.
func TestRejectAndTooEarly(t *testing.T) {
	s := start(t)
	tr := client(t, s)
	s.Reject(true)
	if _, err := do(tr, http3.MethodGet0RTT, s.URL()+"/rejected"); !errors.Is(err, quic.Err0RTTRejected) {
		t.Fatalf("0-RTT GET under Reject: %v, want Err0RTTRejected", err)
	}
	if got := s.Copies("/rejected"); len(got) != 0 {
		t.Fatalf("recorded %+v, want none", got)
	}
	s.Reject(false)
	s.TooEarly(true)
	tr2 := client(t, s)
	if code, err := do(tr2, http3.MethodGet0RTT, s.URL()+"/425"); err != nil || code != http.StatusTooEarly {
		t.Fatalf("0-RTT GET under TooEarly: %d %v", code, err)
	}
	var unprocessed int
	for _, r := range s.Receipts() {
		if r.Path == "/425" && r.Unprocessed {
			unprocessed++
		}
	}
	if unprocessed != 1 {
		t.Fatalf("%d unprocessed receipts of /425, want 1", unprocessed)
	}
}

// TestClosesItself: a server past its Lifetime is closed.
func TestClosesItself(t *testing.T) {
	s, err := New(Config{Lifetime: 50 * time.Millisecond, Delay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server outlived its lifetime")
	}
}

// TestRecordBounded: past its bound (MaxRecorded, lowered here) the
// server answers every request and keeps none of them, and says how
// many it did not keep: a client that sends without end cannot grow it.
func TestRecordBounded(t *testing.T) {
	s, err := New(Config{Delay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.mu.Lock()
	s.maxKept = 5
	s.mu.Unlock()
	tr := &http3.Transport{TLSClientConfig: s.ClientTLSConfig()}
	t.Cleanup(func() { tr.Close() })
	const sent = 40
	for i := range sent {
		if code, err := do(tr, http.MethodGet, fmt.Sprintf("%s/r%d", s.URL(), i)); err != nil || code != 200 {
			t.Fatalf("request %d: %d %v", i, code, err)
		}
	}
	got := s.Requests()
	if len(got) != 5 || got[0].Path != "/r0" || got[4].Path != "/r4" {
		t.Fatalf("kept %d requests (%+v), want the first 5", len(got), got)
	}
	if n := s.Unkept(); n != sent-5 {
		t.Errorf("%d requests not kept, want %d", n, sent-5)
	}
}

// TestRecordBoundedInBytes: bodies fill the record's byte bound before
// its count; past it a request is answered and not kept.
func TestRecordBoundedInBytes(t *testing.T) {
	s, err := New(Config{Delay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tr := &http3.Transport{TLSClientConfig: s.ClientTLSConfig()}
	t.Cleanup(func() { tr.Close() })
	body := strings.Repeat("x", maxBody) // kept twice: the body and the raw form
	const sent = 40
	for i := range sent {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/b%d", s.URL(), i), strings.NewReader(body))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			cancel()
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	kept := len(s.Requests())
	if want := MaxRecordedBytes / (2*maxBody + 256); kept > want+1 || kept < want-1 {
		t.Errorf("kept %d requests of %d MiB each, want about %d within %d MiB", kept, 2*maxBody>>20, want, MaxRecordedBytes>>20)
	}
	if s.Unkept() != sent-kept {
		t.Errorf("%d not kept, want %d", s.Unkept(), sent-kept)
	}
}
