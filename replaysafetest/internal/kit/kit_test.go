package kit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestBoardWait(t *testing.T) {
	var mu sync.Mutex
	var b Board
	b.Init(&mu)
	n := 0
	go func() {
		for range 3 {
			b.Update(func() { n++ })
		}
	}()
	if err := b.Wait(context.Background(), 5*time.Second, "test", true, func() bool { return n == 3 }); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := b.Wait(ctx, time.Second, "test", false, func() bool { return false }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past the deadline: %v", err)
	}
	b.Finish()
	if err := b.Wait(context.Background(), time.Second, "test", true, func() bool { return false }); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait after Finish: %v", err)
	}
}

func TestSplitFields(t *testing.T) {
	type f struct{ n, v string }
	p, h := SplitFields([]f{{":method", "POST"}, {":path", "/x"}, {":bogus", "y"}, {"x-a", "1"}},
		func(x f) (string, string) { return x.n, x.v })
	if p != (Pseudo{Method: "POST", Path: "/x"}) || h.Get("X-A") != "1" || len(h) != 1 {
		t.Errorf("pseudo %+v, header %v", p, h)
	}
}

func TestCert(t *testing.T) {
	var none Cert
	if none.Certificate() != nil || none.CertPool() != nil || none.ClientTLSConfig() != nil {
		t.Error("the zero Cert has a certificate")
	}
	srv, c, err := NewCert("kit test", []string{"h2", "http/1.1"}, 0x0304)
	if err != nil {
		t.Fatal(err)
	}
	cl := c.ClientTLSConfig()
	if len(srv.Certificates) != 1 || cl.NextProtos[0] != "h2" || len(cl.NextProtos) != 1 || cl.MinVersion != 0x0304 || cl.RootCAs == nil {
		t.Errorf("server %+v, client %+v", srv, cl)
	}
}
