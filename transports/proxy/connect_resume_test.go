package proxy

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// parsed is one answer of the CONNECT response parser: the header
// section's length and the response, or the error.
type parsed struct {
	n    int
	resp Response
	err  error
}

func (p parsed) incomplete() bool { return errors.Is(p.err, ErrIncomplete) }

// same reports how a and b differ, or "" when they are the same answer:
// the length, the version, status, reason and header fields, and the
// error's text and offset.
func (a parsed) same(b parsed) string {
	switch {
	case (a.err == nil) != (b.err == nil) || a.err != nil && a.err.Error() != b.err.Error():
		return "errors " + errText(a.err) + " and " + errText(b.err)
	case a.n != b.n:
		return "header lengths differ"
	case a.resp.Proto != b.resp.Proto || a.resp.StatusCode != b.resp.StatusCode || a.resp.Reason != b.resp.Reason:
		return "status lines differ: " + a.resp.Proto + " " + a.resp.Reason + " / " + b.resp.Proto + " " + b.resp.Reason
	case len(a.resp.Header) != len(b.resp.Header) || len(a.resp.Header) > 0 && !reflect.DeepEqual(a.resp.Header, b.resp.Header):
		return "header fields differ"
	}
	var pa, pb *ParseError
	if errors.As(a.err, &pa) != errors.As(b.err, &pb) || pa != nil && (pa.Offset != pb.Offset || pa.Unwrap() != pb.Unwrap()) {
		return "parse errors differ in offset or cause"
	}
	return ""
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// whole parses b at once with a fresh parser.
func whole(b []byte) parsed {
	resp, n, err := ParseConnectHeader(b)
	return parsed{n, resp, err}
}

// resume feeds one parser the prefixes of b that end at cuts (increasing,
// the last at most len(b)), as exchange does when the response arrives
// in pieces, and returns the first answer that is not ErrIncomplete, or
// the last, and the cut it came at.
func resume(b []byte, cuts []int) (parsed, int) {
	p := newConnectParser(true)
	var last parsed
	for _, k := range cuts {
		n, err := p.parse(b[:k])
		last = parsed{n, p.resp, err}
		if err != nil {
			last.n, last.resp = 0, Response{}
		}
		if !last.incomplete() {
			return last, k
		}
	}
	return last, cuts[len(cuts)-1]
}

// splitInputs are responses that end, fail and stop short in different
// ways; the split tests cut each at every byte.
var splitInputs = []string{
	"HTTP/1.1 200 Connection established\r\nVia: 1.1 p\r\n\r\ntunnel bytes",
	"HTTP/1.0 407 Proxy Authentication Required\nProxy-Authenticate: Basic realm=\"x\"\nproxy-authenticate: Negotiate\n\n",
	"HTTP/1.1 200 OK\r\nbad line\r\n\r\n",
	"HTTP/1.1 200 OK\r\nVia: 1.1 p\r\n", // never ends
	"HTTP/1.1 2000 OK\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
	"HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n",
}

// TestParseConnectResponseSplit feeds each response to one parser in two
// and three pieces, cut at every byte, the way exchange resumes it on the
// wire: the parser's answer is the whole response's, it comes with the
// piece that holds the line that decides it, and never before. A fresh
// parser over a prefix is incomplete or answers as the whole, too.
func TestParseConnectResponseSplit(t *testing.T) {
	for _, in := range splitInputs {
		b := []byte(in)
		want := whole(b)
		// decidedAt is the shortest prefix with the whole's answer: the
		// end of the header section, or of the line that is malformed.
		decidedAt := len(b) + 1
		for k := 0; k <= len(b); k++ {
			if w := whole(b[:k]); !w.incomplete() {
				if d := w.same(want); d != "" {
					t.Fatalf("%q: a fresh parse of %d bytes differs from the whole: %s", in, k, d)
				}
				decidedAt = min(decidedAt, k)
			}
		}
		if want.incomplete() != (decidedAt > len(b)) {
			t.Fatalf("%q: the whole is %v, decided at %d", in, want.err, decidedAt)
		}
		for i := 0; i <= len(b); i++ {
			for j := i; j <= len(b); j++ {
				cuts := []int{i, j, len(b)}
				if j == len(b) {
					cuts = cuts[:2] // two pieces
				}
				got, at := resume(b, cuts)
				if d := got.same(want); d != "" {
					t.Fatalf("%q cut at %v: %s (got %d %v, want %d %v)", in, cuts, d, got.n, got.err, want.n, want.err)
				}
				if !got.incomplete() && at != firstCutFrom(cuts, decidedAt) {
					t.Fatalf("%q cut at %v: answered at %d, want the first cut from %d", in, cuts, at, decidedAt)
				}
			}
		}
	}
}

func firstCutFrom(cuts []int, at int) int {
	for _, k := range cuts {
		if k >= at {
			return k
		}
	}
	return -1
}

// TestConnectParserSearchesEachByteOnce dribbles a header section of
// MaxHeaderBytes into one parser a byte at a time, as a proxy sending one
// byte per packet makes exchange do, and checks the resume state after
// every call: the parser has searched everything it was given for a line
// end (so the next call starts at the new byte and no byte is searched
// twice), and the start of the next line only moves forward (no line is
// judged twice). That is why the work is linear in the response's length;
// BenchmarkConnectReplyDribble measures it.
func TestConnectParserSearchesEachByteOnce(t *testing.T) {
	reply := connectReply(MaxHeaderBytes)
	p := newConnectParser(true)
	pos := 0
	for k := 1; k <= len(reply); k++ {
		n, err := p.parse(reply[:k])
		if k == len(reply) {
			if err != nil || n != len(reply) {
				t.Fatalf("the whole reply: %d, %v", n, err)
			}
			break
		}
		if !errors.Is(err, ErrIncomplete) {
			t.Fatalf("%d bytes: %v", k, err)
		}
		if p.pos+p.scanned != k {
			t.Fatalf("after %d bytes the parser has searched up to %d", k, p.pos+p.scanned)
		}
		if p.pos < pos || p.pos > k {
			t.Fatalf("after %d bytes the next line starts at %d, before at %d", k, p.pos, pos)
		}
		pos = p.pos
	}
	if got := len(p.resp.Header["X"]); got == 0 || p.resp.Header.Get("Z") == "" {
		t.Fatalf("fields %d X, Z %q", got, p.resp.Header.Get("Z"))
	}
	// Past the bound without a line end: too large as soon as the bound
	// is reached, whatever arrives after.
	big := []byte("HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", MaxHeaderBytes))
	p = newConnectParser(true)
	for k := 1; k <= len(big); k++ {
		_, err := p.parse(big[:k])
		if k < MaxHeaderBytes && !errors.Is(err, ErrIncomplete) || k >= MaxHeaderBytes && !errors.Is(err, ErrHeaderTooLarge) {
			t.Fatalf("%d bytes: %v", k, err)
		}
		if k == MaxHeaderBytes {
			break
		}
	}
}

// FuzzConnectParserResume feeds its input to ONE parser in pieces cut at
// random points (drawn from seed), each call passing everything so far as
// exchange does on the wire, and compares with the whole input parsed at
// once: the first answer that is not ErrIncomplete is the whole's (length,
// version, status, reason, fields, error and offset), and until it comes
// a fresh parser over the same prefix is incomplete too. Input that never
// ends stays incomplete to the last piece.
func FuzzConnectParserResume(f *testing.F) {
	for i, in := range splitInputs {
		f.Add([]byte(in), uint64(i))
	}
	f.Add([]byte("HTTP/1.1 204\n\n"), uint64(1<<40))
	f.Add([]byte("HTTP/1.1 200 OK\r\n\r"), uint64(7))
	f.Add([]byte("HTTP/1.1 200 OK\r\nX: "+strings.Repeat("a", MaxHeaderBytes)), uint64(3))
	f.Add(connectReply(4<<10), uint64(4)) // a byte at a time: seed%4 == 0
	f.Add(connectReply(MaxHeaderBytes), uint64(5))
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		want := whole(b)
		cuts := cutPoints(len(b), seed)
		p := newConnectParser(true)
		for i, k := range cuts {
			n, err := p.parse(b[:k])
			got := parsed{n, p.resp, err}
			if err != nil {
				got.n, got.resp = 0, Response{}
			}
			if got.incomplete() {
				// Checking every cut of a byte-at-a-time feed against a
				// fresh parse would be quadratic: sample them.
				if len(cuts) <= 16 || i%(len(cuts)/16) == 0 {
					if w := whole(b[:k]); !w.incomplete() {
						t.Fatalf("seed %d: incomplete after %d bytes, which a fresh parser answers (%v)", seed, k, w.err)
					}
				}
				continue
			}
			if d := got.same(want); d != "" {
				t.Fatalf("seed %d, cuts %v: answered after %d bytes: %s (got %d %v; whole %d %v)", seed, clipCuts(cuts), k, d, got.n, got.err, want.n, want.err)
			}
			if got.err == nil && got.n > k {
				t.Fatalf("seed %d: header length %d after %d bytes", seed, got.n, k)
			}
			return
		}
		if !want.incomplete() {
			t.Fatalf("seed %d, cuts %v: incomplete to the end; whole %d %v", seed, clipCuts(cuts), want.n, want.err)
		}
	})
}

// cutPoints returns increasing cut points in [0, n] that end at n: every
// byte when seed%4 is 0 and n is at most 4 KiB (a longer dribble is
// TestConnectParserSearchesEachByteOnce's), else up to 32 points drawn
// with seed.
func cutPoints(n int, seed uint64) []int {
	if seed%4 == 0 && n <= 4<<10 {
		cuts := make([]int, n+1)
		for i := range cuts {
			cuts[i] = i
		}
		return cuts
	}
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	cuts := []int{n}
	for range r.IntN(min(n, 32) + 1) {
		cuts = append(cuts, r.IntN(n+1))
	}
	slices.Sort(cuts)
	return slices.Compact(cuts)
}

func clipCuts(cuts []int) []int {
	if len(cuts) > 40 {
		return cuts[:40]
	}
	return cuts
}

// BenchmarkConnectReplyDribble runs a CONNECT exchange whose reply
// arrives a byte per read, at 16 KiB and at MaxHeaderBytes: ns/byte stays
// about the same when the work is linear in the reply's length (it was
// parsed again after every read before: 188 ms of CPU for 64 KiB).
func BenchmarkConnectReplyDribble(b *testing.B) {
	for _, size := range []int{16 << 10, MaxHeaderBytes} {
		reply := connectReply(size)
		b.Run("bytes-"+strconv.Itoa(size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c := &dribbleConn{in: reply}
				if _, _, err := Connect(c, ConnectRequest{Target: "origin:80", Hop: 1, Proxy: "p:1"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(size), "ns/byte")
		})
	}
}
