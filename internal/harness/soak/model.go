package soak

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"
)

// Model is the fault model of a soak: which faults the server makes.
type Model uint8

// Models.
const (
	// ModelProd is the faults servers and networks make in production,
	// the default: per request, stream-level faults at rate Config.Faults
	// (a stream reset with INTERNAL_ERROR or CANCEL, a refused stream, a
	// response cut after half its body, a 1–20 ms delay, a 503 with
	// Retry-After, a 425); per connection, an end after a number of
	// requests drawn with mean Config.ConnLife, half graceful and half
	// abrupt; and a server restart every Config.Restarts.
	ModelProd Model = iota
	// ModelHarsh is the stress test of the hard bounds: at rate
	// Config.Faults each request draws one of the faults FaultIdleFIN to
	// FaultDelay, most of which end the whole connection.
	ModelHarsh

	modelCount // number of models; keep last
)

var modelNames = [modelCount]string{"prod", "harsh"}

// String returns the model's name, prod or harsh.
func (m Model) String() string {
	if m < modelCount {
		return modelNames[m]
	}
	return fmt.Sprintf("Model(%d)", uint8(m))
}

// ParseModel returns the model named s.
func ParseModel(s string) (Model, error) {
	for m, name := range modelNames {
		if s == name {
			return Model(m), nil
		}
	}
	return 0, fmt.Errorf("soak: unknown fault model %q (want prod or harsh)", s)
}

// Defaults of the prod model.
const (
	// DefaultConnLife is the mean number of requests a connection
	// carries before the prod model ends it.
	DefaultConnLife = 500
	// DefaultRestarts is the period of the prod model's server restarts.
	DefaultRestarts = 5 * time.Second
	// RestartRefusal is how long the listener refuses after a restart.
	RestartRefusal = 100 * time.Millisecond
	// StreamLimit is the server's limit of concurrent streams per
	// connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS, QUIC's
	// MaxIncomingStreams).
	StreamLimit = 250
	// abruptWindow bounds the random moment of an abrupt end after the
	// request that draws it arrives.
	abruptWindow = 20 * time.Millisecond
)

// prodRequestFaults are the per-request faults of the prod model, drawn
// with equal weights.
var prodRequestFaults = []Fault{FaultStreamReset, FaultStreamCancel, FaultRefused,
	FaultCutMidResponse, FaultDelay, FaultRetryAfter, FaultTooEarly}

// prodRequestFault draws the fault of copy k of request id under the prod
// model at rate p, with the delay of FaultDelay. It depends on the seed,
// the id and the copy only, so the same seed makes the same faults
// whatever the order the requests arrive in, for replaysafe and the peer
// alike.
func prodRequestFault(seed uint64, p float64, id string, copyNo int) (Fault, time.Duration) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	r := rand.New(rand.NewPCG(seed^0x5851f42d4c957f2d, h.Sum64()<<8|uint64(copyNo&0xff)))
	if p <= 0 || r.Float64() >= p {
		return FaultNone, 0
	}
	f := prodRequestFaults[r.IntN(len(prodRequestFaults))]
	return f, time.Duration(1+r.IntN(20)) * time.Millisecond
}

// connPlan is how the prod model ends one connection.
type connPlan struct {
	// life is the number of requests after whose arrival the end
	// happens: the life-th request on the connection triggers it.
	life int64
	// end is FaultGoAway, FaultIdleFIN (graceful) or FaultAbruptFIN,
	// FaultAbruptRST (abrupt).
	end Fault
	// after is the delay of an abrupt end after the life-th request
	// arrives, uniform in [0, abruptWindow).
	after time.Duration
}

// prodConnPlan draws the end of the n-th connection the server accepts
// (from 0) under the prod model: a life geometric with mean meanLife
// requests (none when meanLife is negative); half graceful, as GOAWAY
// over HTTP/2 and HTTP/3 and, over HTTP/1.1, half "Connection: close"
// and half an idle close; half abrupt, FIN or RST at a random moment.
func prodConnPlan(seed uint64, n uint64, meanLife int, proto string) connPlan {
	r := rand.New(rand.NewPCG(seed^0x2545f4914f6cdd1d, n))
	if meanLife < 0 {
		return connPlan{} // life 0: the connection never ends
	}
	life := int64(1)
	if meanLife > 1 {
		// Geometric on 1, 2, ...: each request ends the connection with
		// probability 1/meanLife, so the mean is meanLife.
		q := 1 - 1/float64(meanLife)
		u := 1 - r.Float64() // in (0, 1]
		life = 1 + int64(math.Floor(math.Log(u)/math.Log(q)))
	}
	p := connPlan{life: life}
	graceful, half := r.IntN(2) == 0, r.IntN(2) == 0
	switch {
	case graceful && (proto == "h1" || proto == "h1tls") && half:
		p.end = FaultIdleFIN
	case graceful:
		p.end = FaultGoAway
	case half:
		p.end = FaultAbruptFIN
	default:
		p.end = FaultAbruptRST
	}
	p.after = time.Duration(r.Int64N(int64(abruptWindow)))
	return p
}

// graceful reports whether an end lets every request in flight finish.
func (p connPlan) graceful() bool { return p.end == FaultGoAway || p.end == FaultIdleFIN }
