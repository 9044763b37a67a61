package driver

import (
	"context"
	"errors"

	"github.com/replaysafe/replaysafe/adapters/recorder"
	"github.com/replaysafe/replaysafe/fsm"
)

// streamRec feeds one HTTP/2 or HTTP/3 wire attempt's events into an
// fsm.Machine and keeps them as a trace. The adapter's Attempt
// (adapters/h2, adapters/h3) produces the progress events (from the
// stack's httptrace hooks, on the stack's goroutines) and the failure
// event (from the error and what the adapter watched); streamRec stamps,
// deduplicates and orders nothing else. It is safe for concurrent use.
type streamRec struct {
	recorder.Core
}

// Emit is the adapters/h2 and h3 Attempt's event sink
// (h2.Emitter): progress events, fed at most once each.
func (r *streamRec) Emit(e fsm.Event) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	var f fsm.Facts
	switch e.Kind {
	case fsm.EventFirstByteWritten:
		f = fsm.FactWroteAny
	case fsm.EventRequestWritten:
		f = fsm.FactWroteAll
	case fsm.EventFirstResponseByte:
		f = fsm.FactResponseByte
	case fsm.EventInformational:
		if r.HasLocked(fsm.FactHeaders) {
			return
		}
	}
	if f != 0 && r.HasLocked(f) {
		return
	}
	r.FeedLocked(e)
}

// BodyRead feeds EventBodyRead, once.
func (r *streamRec) BodyRead() {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if !r.HasLocked(fsm.FactBodyRead) {
		r.FeedLocked(fsm.Event{Kind: fsm.EventBodyRead})
	}
}

// FinalHeaders feeds EventFinalHeaders, after the response byte it
// implies when x/net's hook has not reported it yet.
func (r *streamRec) FinalHeaders() fsm.Decision {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if !r.HasLocked(fsm.FactResponseByte) {
		r.FeedLocked(fsm.Event{Kind: fsm.EventFirstResponseByte})
	}
	return r.FeedLocked(fsm.Event{Kind: fsm.EventFinalHeaders})
}

// contextEvent returns the event for ctx, the caller's context, when it
// ended.
func contextEvent(ctx context.Context) (fsm.Event, bool) {
	switch err := ctx.Err(); {
	case err == nil:
		return fsm.Event{}, false
	case errors.Is(err, context.DeadlineExceeded):
		return fsm.Event{Kind: fsm.EventTimeout}, true
	}
	return fsm.Event{Kind: fsm.EventCanceled}, true
}
