package kit

import (
	"bytes"
	"cmp"
	"iter"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Pseudo holds a request's pseudo-header fields (RFC 9113 §8.3.1,
// RFC 9114 §4.3.1).
type Pseudo struct {
	Method, Scheme, Authority, Path, Protocol string
}

// SplitFields sorts a request's decoded fields into its pseudo-header
// fields and its regular header (canonical keys); an unknown
// pseudo-header field is dropped.
func SplitFields[F any](fields []F, nv func(F) (string, string)) (Pseudo, http.Header) {
	var p Pseudo
	h := make(http.Header)
	for _, f := range fields {
		name, value := nv(f)
		switch name {
		case ":method":
			p.Method = value
		case ":scheme":
			p.Scheme = value
		case ":authority":
			p.Authority = value
		case ":path":
			p.Path = value
		case ":protocol":
			p.Protocol = value
		default:
			if !strings.HasPrefix(name, ":") {
				h.Add(name, value)
			}
		}
	}
	return p, h
}

// WithField returns a copy of h (nil: a new header) with the field key
// added with value: the WithHeader of every scripted action.
func WithField(h http.Header, key, value string) http.Header {
	h = h.Clone()
	if h == nil {
		h = make(http.Header)
	}
	h.Add(key, value)
	return h
}

// OrOK returns status, or 200 when it is zero: the status of every
// scripted response.
func OrOK(status int) int {
	if status == 0 {
		return http.StatusOK
	}
	return status
}

// SortedFields yields every field line of h, keys in sorted order and
// each key's values in order: how every scripted server writes a header.
func SortedFields(h http.Header) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, k := range slices.Sorted(maps.Keys(h)) {
			for _, v := range h[k] {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// Keys returns the keys of m, in no order.
func Keys[K comparable, V any](m map[K]V) []K { return slices.Collect(maps.Keys(m)) }

// SortedKeys returns the keys of m in increasing order.
func SortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }

// CloneMessage returns copies of a recorded request's header, trailer
// and body that share no memory with them.
func CloneMessage(header, trailer http.Header, body []byte) (http.Header, http.Header, []byte) {
	return header.Clone(), trailer.Clone(), bytes.Clone(body)
}
