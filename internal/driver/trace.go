package driver

import (
	"context"
	"net/http/httptrace"
	"net/textproto"
)

// withTrace returns ctx with ours, an attempt's httptrace hooks, composed
// with the caller's hooks in ctx as httptrace.WithClientTrace composes
// them, except for Got1xxResponse: a 1xx over the attempt's bound fails
// the request even when the caller has that hook too. httptrace's own
// composition calls both hooks and returns the caller's verdict alone,
// and net/http and x/net stop counting 1xx header bytes once any hook is
// installed, so a caller's hook that accepts every 1xx (the Forwarder's
// relay does) would leave the bound to nobody. Here the attempt's hook
// runs first; when it refuses, the caller's hook does not see the
// response, and otherwise the caller's verdict stands.
func withTrace(ctx context.Context, ours *httptrace.ClientTrace) context.Context {
	caller := httptrace.ContextClientTrace(ctx)
	if caller == nil || caller.Got1xxResponse == nil || ours.Got1xxResponse == nil {
		return httptrace.WithClientTrace(ctx, ours)
	}
	own, theirs := ours.Got1xxResponse, caller.Got1xxResponse
	rest, merged := *caller, *ours
	rest.Got1xxResponse = nil
	merged.Got1xxResponse = func(code int, h textproto.MIMEHeader) error {
		if err := own(code, h); err != nil {
			return err
		}
		return theirs(code, h)
	}
	ctx = httptrace.WithClientTrace(withoutTrace{ctx, caller}, &rest)
	return httptrace.WithClientTrace(ctx, &merged)
}

// withoutTrace is a context whose Value hides t, the caller's
// ClientTrace, so that httptrace.WithClientTrace finds no hooks to
// compose with (withTrace composes them itself).
type withoutTrace struct {
	context.Context
	t *httptrace.ClientTrace
}

func (c withoutTrace) Value(key any) any {
	v := c.Context.Value(key)
	if t, ok := v.(*httptrace.ClientTrace); ok && t == c.t {
		return nil
	}
	return v
}
