package pool

import (
	"fmt"
	"testing"
	"time"
)

// TestMemoBounded: a memo full of destinations drops the stale entries
// first, then an arbitrary one, and always learns the new destination;
// it never holds more than MaxMemo.
func TestMemoBounded(t *testing.T) {
	now := time.Now()
	c := Memo[string, time.Time]{Stale: func(exp time.Time) bool { return !now.Before(exp) }}
	for i := range MaxMemo {
		exp := now.Add(time.Hour)
		if i%2 == 0 {
			exp = now.Add(-time.Second) // expired
		}
		c.Store(fmt.Sprintf("o%d:443", i), exp)
	}
	c.Store("new:443", now.Add(time.Hour))
	if n := c.Len(); n != MaxMemo/2+1 {
		t.Errorf("%d entries after the stale ones went, want %d", n, MaxMemo/2+1)
	}
	if _, ok := c.Load("new:443"); !ok {
		t.Error("the new destination was not learned")
	}
	var live Memo[int, bool]
	for i := range 3 * MaxMemo {
		live.Store(i, true)
		if live.Len() > MaxMemo {
			t.Fatalf("%d entries", live.Len())
		}
	}
	if _, ok := live.Load(3*MaxMemo - 1); !ok {
		t.Error("the last destination was not learned")
	}
}
