package informational

import (
	"errors"
	"net/textproto"
	"strings"
	"testing"
)

func TestCounterBounds(t *testing.T) {
	var c Counter // defaults
	for i := range DefaultCount {
		if err := c.Add(103, nil); err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
	}
	err := c.Add(103, nil)
	var le *LimitError
	if !errors.As(err, &le) || le.Count != DefaultCount+1 || !errors.Is(err, ErrLimit) {
		t.Fatalf("response %d: %v, want a LimitError", DefaultCount+1, err)
	}
	if c.Add(100, nil) != err || c.Err() != err {
		t.Error("the error is not sticky")
	}
	want := "server sent 33 informational (1xx) responses, more than the 32 an attempt accepts (last status 103)"
	if err.Error() != want {
		t.Errorf("text %q, want %q", err, want)
	}

	var b Counter
	b.SetLimit(Limit{Count: -1, Bytes: 1000})
	h := textproto.MIMEHeader{"Link": {strings.Repeat("x", 400)}}
	for i := range 2 { // 2 × (4+400+32) + 2 × 42 = 956
		if err := b.Add(103, h); err != nil {
			t.Fatalf("response %d of 2 under 1000 bytes refused: %v", i+1, err)
		}
	}
	if err := b.Add(103, h); !errors.As(err, &le) || le.Bytes != 3*(4+400+32+42) || !strings.Contains(err.Error(), "header bytes") {
		t.Fatalf("third: %v (%+v)", err, le)
	}

	var u Counter
	u.SetLimit(Limit{Count: -1, Bytes: -1})
	for range 1000 {
		if err := u.Add(103, h); err != nil {
			t.Fatal(err)
		}
	}
	if u.Count() != 1000 || u.Err() != nil {
		t.Errorf("unbounded counter: %d, %v", u.Count(), u.Err())
	}
}
