package h2

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestRecvBufAgainstModel: random writes and reads of a stream's
// receive buffer give back the bytes written, in order, with its count
// of unread bytes right at every step; free drops what is unread and
// reports it. The seed is printed.
func TestRecvBufAgainstModel(t *testing.T) {
	const seed = 20261208
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var b recvBuf
	var model bytes.Buffer
	next := byte(0)
	for step := range 20000 {
		if rng.IntN(2) == 0 {
			p := make([]byte, rng.IntN(3*chunkLarge/2))
			for i := range p {
				p[i], next = next, next+1
			}
			b.write(p)
			model.Write(p)
		} else {
			p := make([]byte, rng.IntN(2*chunkLarge))
			n := b.read(p)
			want := model.Next(len(p))
			if !bytes.Equal(p[:n], want) {
				t.Fatalf("step %d: read %d bytes that differ from the model's %d", step, n, len(want))
			}
		}
		if int(b.n) != model.Len() {
			t.Fatalf("step %d: %d unread, the model %d", step, b.n, model.Len())
		}
	}
	if got, want := b.free(), model.Len(); got != want {
		t.Errorf("free dropped %d bytes, want %d", got, want)
	}
	if b.chunks != nil || b.n != 0 || b.r != 0 {
		t.Errorf("after free: %d chunks, n %d, r %d", len(b.chunks), b.n, b.r)
	}
}

// TestRecvBufReaderKeepingUpReusesItsSlice: a reader that drains each
// DATA frame before the next arrives refills the one chunk slot in
// place: no slice is made after the first write.
func TestRecvBufReaderKeepingUpReusesItsSlice(t *testing.T) {
	var b recvBuf
	if b.chunks != nil {
		t.Fatal("a new buffer holds a slice")
	}
	p := make([]byte, 1000)
	b.write(p)
	first := &b.chunks[:1][0]
	for range 100 {
		if n := b.read(make([]byte, 2000)); n != len(p) {
			t.Fatalf("read %d bytes, want %d", n, len(p))
		}
		b.write(p)
		if &b.chunks[:1][0] != first {
			t.Fatal("the chunk slice was made again")
		}
	}
	into := make([]byte, 2000)
	allocs := testing.AllocsPerRun(100, func() {
		b.read(into)
		b.write(p)
	})
	if allocs != 0 {
		t.Errorf("%.0f allocations per drain and refill, want 0", allocs)
	}
	b.free()
}
