package h1_test

import (
	"context"
	"errors"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/adapters/h1"
	"github.com/replaysafe/replaysafe/fsm"
)

// aborts records the calls of an h1.HeaderAborter.
type aborts struct{ errs []*h1.HeaderTimeoutError }

func (a *aborts) HeaderSectionTimedOut(err *h1.HeaderTimeoutError) { a.errs = append(a.errs, err) }

// written returns a Recorder whose GET was written on a new connection.
func written(clk *fakeClock) *h1.Recorder {
	r := h1.NewRecorder(fsm.Request{Method: fsm.MethodGET}, fsm.Limits{}, clk, nil)
	r.Acquired(false)
	r.Wrote()
	r.ClientTrace().WroteRequest(httptrace.WroteRequestInfo{})
	return r
}

// TestHeaderSectionBound: once a header section's first byte arrived,
// the section must end within the bound; past it the machine fails the
// attempt as a timeout (RS06) and the aborter is told once, with the
// error naming the bound.
func TestHeaderSectionBound(t *testing.T) {
	clk := &fakeClock{}
	r := written(clk)
	var ab aborts
	r.BoundHeaderSections(20*time.Second, clk, &ab)
	clk.advance(time.Hour) // the server thinks: not bounded
	if clk.armed() != 0 || len(ab.errs) != 0 {
		t.Fatalf("%d timers armed, %d aborts before any response byte", clk.armed(), len(ab.errs))
	}
	r.Read(1, nil)
	if clk.armed() != 0 {
		t.Fatal("the bound armed before a second read: a section in one read needs no timer")
	}
	r.Reading() // net/http reads on: the section did not arrive whole
	clk.advance(19 * time.Second)
	r.Read(1, nil) // more bytes do not restart the bound
	r.Reading()
	if len(ab.errs) != 0 || r.Decision().Action != fsm.ActionContinue {
		t.Fatalf("aborted at 19 s: %v", r.Decision())
	}
	clk.advance(time.Second)
	if len(ab.errs) != 1 || ab.errs[0].Limit != 20*time.Second || ab.errs[0].Interim != 0 {
		t.Fatalf("aborts %+v, want one of 20s", ab.errs)
	}
	if d := r.Decision(); d.Action != fsm.ActionFail || d.Rule != fsm.RuleTimeout {
		t.Fatalf("decision %v, want a failure by RS06", d)
	}
	err := r.HeaderSectionError()
	var he *h1.HeaderTimeoutError
	if !errors.As(err, &he) || !errors.Is(err, context.DeadlineExceeded) || err.Error() != "h1: response header section did not end within 20s of its first byte" {
		t.Errorf("HeaderSectionError %v", err)
	}
	checkTrace(t, r)
	clk.advance(time.Hour)
	if len(ab.errs) != 1 {
		t.Errorf("%d aborts", len(ab.errs))
	}
}

// TestHeaderSectionBoundPerSection: each informational response ends a
// section; the time before the next section's first byte is not
// bounded.
func TestHeaderSectionBoundPerSection(t *testing.T) {
	clk := &fakeClock{}
	r := written(clk)
	var ab aborts
	r.BoundHeaderSections(20*time.Second, clk, &ab)
	r.Read(1, nil)
	r.Reading()
	clk.advance(15 * time.Second)
	if err := r.ClientTrace().Got1xxResponse(103, nil); err != nil {
		t.Fatal(err)
	}
	if clk.armed() != 0 {
		t.Fatal("the bound still armed after the 103")
	}
	clk.advance(time.Minute)
	r.Read(1, nil)
	r.Reading()
	clk.advance(20 * time.Second)
	if len(ab.errs) != 1 || ab.errs[0].Interim != 1 {
		t.Fatalf("aborts %+v, want one after 1 interim section", ab.errs)
	}
}

// TestHeaderSectionBoundCountsFromFirstByte: a section under way when
// the bound is set counts from its first byte.
func TestHeaderSectionBoundCountsFromFirstByte(t *testing.T) {
	clk := &fakeClock{}
	r := written(clk)
	r.Read(1, nil)
	clk.advance(15 * time.Second)
	var ab aborts
	r.BoundHeaderSections(20*time.Second, clk, &ab)
	clk.advance(5 * time.Second)
	if len(ab.errs) != 1 {
		t.Fatalf("%d aborts 20 s after the first byte, want 1", len(ab.errs))
	}
}

// TestHeaderSectionBoundEnds: the final header section, or the
// attempt's end, stops the bound; a zero bound arms nothing.
func TestHeaderSectionBoundEnds(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit time.Duration
		end   func(r *h1.Recorder)
	}{
		{"final headers", 20 * time.Second, func(r *h1.Recorder) { r.FinalHeaders() }},
		{"stop", 20 * time.Second, func(r *h1.Recorder) { r.Stop() }},
		{"zero bound", 0, func(*h1.Recorder) {}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &fakeClock{}
			r := written(clk)
			var ab aborts
			r.BoundHeaderSections(c.limit, clk, &ab)
			r.Read(1, nil)
			r.Reading()
			c.end(r)
			if n := clk.armed(); n != 0 {
				t.Errorf("%d timers armed", n)
			}
			clk.advance(time.Hour)
			if len(ab.errs) != 0 || r.HeaderSectionError() != nil {
				t.Errorf("aborts %+v, error %v", ab.errs, r.HeaderSectionError())
			}
			r.Read(1, nil) // a body byte, or one after the end
			r.Reading()
			if n := clk.armed(); n != 0 {
				t.Errorf("%d timers armed after a later byte", n)
			}
		})
	}
}
