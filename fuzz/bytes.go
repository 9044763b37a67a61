package fuzz

import (
	"errors"
	"fmt"
	"time"

	"github.com/replaysafe/replaysafe/fsm"
	modeltest "github.com/replaysafe/replaysafe/model_test"
)

// The byte-to-trace format of the machine targets. A header of seven bytes
// gives the request facts and the limits; then every four bytes are one
// event. Every byte string decodes to something: values wrap around, a
// short tail is ignored, and the number of events is bounded.
//
//	header: method (mod 11) | body (mod 4) | flags | acquire, write, header, body limit (ms, 0 = none)
//	flags:  bit 0 Idempotency-Key, bit 1 retry policy, bit 2 resend off, bit 3 attempt=resend, bit 4 early-keyed
//	event:  kind (mod EventKinds+1; EventKinds is one past the vocabulary) | a | b | ms the clock moves first
//
// What a and b mean depends on the kind: conn-acquired reused = a&1,
// early = a&2 and proto = b&7 (values past h3 included); timeout phase = a&7; h2-goaway
// stream = a, last = b; h3-goaway stream = a, boundary = b&0x7f, known
// when b&0x80 is set. Other kinds ignore them.
const (
	headerBytes = 7
	eventBytes  = 4
	maxEvents   = 64
)

// Decode turns fuzz input into a trace; it never fails.
func Decode(data []byte) modeltest.Trace {
	var h [headerBytes]byte
	copy(h[:], data)
	tr := modeltest.Trace{
		Request: fsm.Request{
			Method:         fsm.Method(h[0] % (byte(fsm.MethodOther) + 1)),
			Body:           fsm.BodyKind(h[1] % (byte(fsm.BodyOneShotConsumed) + 1)),
			IdempotencyKey: h[2]&1 != 0,
			RetryPolicy:    h[2]&2 != 0,
			ResendOff:      h[2]&4 != 0,
			EarlyKeyed:     h[2]&16 != 0,
		},
		Limits: fsm.Limits{
			Acquire: time.Duration(h[3]) * time.Millisecond,
			Write:   time.Duration(h[4]) * time.Millisecond,
			Header:  time.Duration(h[5]) * time.Millisecond,
			Body:    time.Duration(h[6]) * time.Millisecond,
		},
	}
	if h[2]&8 != 0 {
		tr.Request.Attempt = fsm.AttemptResend
	}
	var now fsm.Instant
	for rest := data[min(len(data), headerBytes):]; len(rest) >= eventBytes && len(tr.Events) < maxEvents; rest = rest[eventBytes:] {
		kind, a, b, dt := rest[0], rest[1], rest[2], rest[3]
		now += fsm.Instant(dt) * fsm.Instant(time.Millisecond)
		e := fsm.Event{Kind: fsm.EventKind(kind % byte(fsm.EventKinds+1)), At: now}
		switch e.Kind {
		case fsm.EventConnAcquired:
			e.Reused, e.Early, e.Proto = a&1 != 0, a&2 != 0, fsm.Proto(b&7)
		case fsm.EventTimeout:
			e.Phase = fsm.Phase(a & 7)
		case fsm.EventH2GoAway:
			e.Stream, e.Boundary = uint64(a), uint64(b)
		case fsm.EventH3GoAway:
			e.Stream, e.Boundary, e.BoundaryKnown = uint64(a), uint64(b&0x7f), b&0x80 != 0
		}
		tr.Events = append(tr.Events, e)
	}
	return tr
}

// Encode is the inverse of Decode for the traces the format can hold
// (instants and limits in whole milliseconds, a start of zero, the
// clock never going back, small stream IDs); it reports the first thing
// it cannot hold.
func Encode(tr modeltest.Trace) ([]byte, error) {
	ms := func(d time.Duration, what string) (byte, error) {
		if d < 0 || d%time.Millisecond != 0 || d > 255*time.Millisecond {
			return 0, fmt.Errorf("%s %v is not a whole number of milliseconds up to 255", what, d)
		}
		return byte(d / time.Millisecond), nil
	}
	if tr.Start != 0 {
		return nil, errors.New("the format starts every trace at 0")
	}
	if len(tr.Events) > maxEvents {
		return nil, fmt.Errorf("%d events, the format holds %d", len(tr.Events), maxEvents)
	}
	r := tr.Request
	flags := bit(r.IdempotencyKey, 1) | bit(r.RetryPolicy, 2) | bit(r.ResendOff, 4) | bit(r.Attempt == fsm.AttemptResend, 8) | bit(r.EarlyKeyed, 16)
	out := []byte{byte(r.Method), byte(r.Body), flags}
	for _, l := range []struct {
		d    time.Duration
		name string
	}{{tr.Limits.Acquire, "acquire limit"}, {tr.Limits.Write, "write limit"}, {tr.Limits.Header, "header limit"}, {tr.Limits.Body, "body limit"}} {
		b, err := ms(l.d, l.name)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	var now fsm.Instant
	for _, e := range tr.Events {
		dt, err := ms(time.Duration(e.At-now), "time step")
		if err != nil {
			return nil, fmt.Errorf("%v: %w", e, err)
		}
		now = e.At
		var a, b byte
		switch e.Kind {
		case fsm.EventConnAcquired:
			a, b = bit(e.Reused, 1)|bit(e.Early, 2), byte(e.Proto)
		case fsm.EventTimeout:
			a = byte(e.Phase)
		case fsm.EventH2GoAway:
			if e.Stream > 255 || e.Boundary > 255 {
				return nil, fmt.Errorf("%v: stream IDs above 255", e)
			}
			a, b = byte(e.Stream), byte(e.Boundary)
		case fsm.EventH3GoAway:
			if e.Stream > 255 || e.Boundary > 127 {
				return nil, fmt.Errorf("%v: stream IDs above 255 or a boundary above 127", e)
			}
			a, b = byte(e.Stream), byte(e.Boundary)|bit(e.BoundaryKnown, 0x80)
		}
		out = append(out, byte(e.Kind), a, b, dt)
	}
	if d := Decode(out); !sameTrace(d, tr) {
		return nil, fmt.Errorf("the trace does not survive the format (a value outside it?)")
	}
	return out, nil
}

func bit(v bool, b byte) byte {
	if v {
		return b
	}
	return 0
}

func sameTrace(a, b modeltest.Trace) bool {
	if a.Request != b.Request || a.Limits != b.Limits || a.Start != b.Start || len(a.Events) != len(b.Events) {
		return false
	}
	for i := range a.Events {
		if a.Events[i] != b.Events[i] {
			return false
		}
	}
	return true
}

// CheckMachineBytes decodes data and runs it through fsm and the model
// (modeltest.Run: the model after every event, the invariants over the
// attempt). Once the original attempt decides to resend, the remaining
// events go to the call's second attempt, made with Request.Resend, which
// must never resend.
func CheckMachineBytes(data []byte) error {
	first, second, ok := SplitAttempts(Decode(data))
	if _, _, err := modeltest.Run(first); err != nil {
		return err
	}
	if ok {
		if _, _, err := modeltest.Run(second); err != nil {
			return fmt.Errorf("second attempt: %w", err)
		}
	}
	return nil
}

// SplitAttempts cuts a decoded trace where fsm decides to resend the
// original attempt: the events after that go to the second attempt, which
// starts then with Request.Resend. ok is false when there is no second
// attempt to run.
func SplitAttempts(tr modeltest.Trace) (first, second modeltest.Trace, ok bool) {
	m := fsm.New(tr.Request, tr.Limits, tr.Start)
	for i, e := range tr.Events {
		if m.Step(e).Action != fsm.ActionResend {
			continue
		}
		first = tr
		first.Events = tr.Events[:i+1]
		if tr.Request.Attempt == fsm.AttemptResend || i == len(tr.Events)-1 {
			return first, modeltest.Trace{}, false
		}
		second = modeltest.Trace{Request: tr.Request.Resend(), Limits: tr.Limits, Start: e.At, Events: tr.Events[i+1:]}
		return first, second, true
	}
	return tr, modeltest.Trace{}, false
}
