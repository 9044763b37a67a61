package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Workload is one kind of request the throughput benchmarks send.
type Workload struct {
	Name   string // in benchmark names
	Method string
	Body   int // request body bytes; 0 for none
}

// Workloads are GET and a 4 KiB POST.
var Workloads = []Workload{
	{Name: "GET", Method: http.MethodGet},
	{Name: "POST4K", Method: http.MethodPost, Body: 4 << 10},
}

// Concurrencies are the numbers of callers running at once.
var Concurrencies = []int{1, 64}

var payload = bytes.Repeat([]byte("x"), 64<<10)

// emptyHeader is shared by every request: no client under test writes to
// a request's header.
var emptyHeader = http.Header{}

// payloadBody is a buffered request body: a reader over payload, with
// GetBody giving another.
type payloadBody struct{ bytes.Reader }

func (*payloadBody) Close() error { return nil }

// NewRequest returns a request of workload w for u, built with as few
// allocations as a caller can manage (one for GET, three for POST), so
// that allocs/op shows the client's.
func NewRequest(u *url.URL, w Workload) *http.Request {
	req := &http.Request{Method: w.Method, URL: u, Header: emptyHeader, Host: u.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if w.Body > 0 {
		body := payload[:w.Body]
		b := &payloadBody{}
		b.Reset(body)
		req.Body, req.ContentLength = b, int64(w.Body)
		req.GetBody = func() (io.ReadCloser, error) {
			b := &payloadBody{}
			b.Reset(body)
			return b, nil
		}
	}
	return req
}

// Do sends req and reads its response to the end.
func Do(rt http.RoundTripper, req *http.Request) error {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("bench: status %d", resp.StatusCode)
	}
	return err
}

// RoundTrips sends n requests of workload w to u through rt from conc
// goroutines at once, and stores each call's latency in lat[:n].
func RoundTrips(rt http.RoundTripper, u *url.URL, w Workload, conc, n int, lat []time.Duration) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				start := time.Now()
				err := Do(rt, NewRequest(u, w))
				lat[i] = time.Since(start)
				if err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// Percentile returns the p-th percentile (0 < p <= 100) of lat, which it
// sorts.
func Percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(float64(len(lat))*p/100+0.5) - 1
	return lat[min(max(i, 0), len(lat)-1)]
}

// errNotReady is returned when a memory measurement could not set its
// state up.
var errNotReady = errors.New("bench: the server did not reach the expected state")
