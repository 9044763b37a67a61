// Package kit holds the harness the scripted servers of replaysafetest
// share: bounds, record notification and waiting, TLS set-up.
package kit

import "time"

// Bounds of an endless interim (1xx) flood, so that a test always ends.
const (
	// EndlessMaxResponses is the most interim responses one flood sends.
	EndlessMaxResponses = 1 << 20
	// EndlessMaxDuration is the longest one flood lasts.
	EndlessMaxDuration = 10 * time.Second
)

// Default sets *p to v when *p is zero or negative: how every Config
// field with a default is filled.
func Default[T ~int | ~int64](p *T, v T) {
	if *p <= 0 {
		*p = v
	}
}

// Map returns f of every element of in, in order.
func Map[A, B any](in []A, f func(A) B) []B {
	out := make([]B, len(in))
	for i, a := range in {
		out[i] = f(a)
	}
	return out
}
