package h3

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptrace"
	"net/textproto"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe/fsm"
)

// OwnStream reports whether req can be sent by Attempt.RoundTrip, on a
// request stream the Attempt opens itself: it has no body and no
// trailers, and it is neither a CONNECT (an extended one waits for the
// server's SETTINGS, which ClientConn.RoundTrip does) nor one of
// quic-go's 0-RTT methods. quic-go's public stream API cannot announce a
// body: it writes every request's header section as if there were none
// (a POST, PUT or PATCH with "content-length: 0"), so a request with a
// body needs ClientConn.RoundTrip.
func OwnStream(req *http.Request) bool {
	return (req.Body == nil || req.Body == http.NoBody) && len(req.Trailer) == 0 &&
		req.Method != http.MethodConnect && req.Method != http3.MethodGet0RTT && req.Method != http3.MethodHead0RTT
}

// StreamTrace returns the hook a request Attempt.RoundTrip sends needs:
// the first response byte, which quic-go reports from the stream's
// reader. RoundTrip reports the rest itself, without a hook (and without
// WroteHeaderField, for which quic-go builds a slice per header field).
// emit and uploaded are used as Trace uses them. Call it once per
// Attempt, instead of Trace.
func (a *Attempt) StreamTrace(emit Emitter, uploaded Uploader) *httptrace.ClientTrace {
	a.emit, a.uploaded = emit, uploaded
	a.trace = httptrace.ClientTrace{GotFirstResponseByte: a.gotFirstResponseByte}
	return &a.trace
}

// RoundTrip sends req, for which OwnStream holds and whose context
// carries StreamTrace's hooks, on a new request stream of cc, and returns
// the final response with its Request and TLS (state, shared by the
// connection's responses, as net/http shares its connection's) set.
//
// It does what ClientConn.RoundTrip does for such a request, reporting
// what Trace's hooks report and calling the context's other httptrace
// hooks (the caller's) where ClientConn.RoundTrip calls them, but
// without its per-request goroutine and channels and without a
// WroteHeaderField hook: the stream's ID comes from the stream, so the
// Watch need not hand it over, and the Attempt knows it before a byte is
// written. From then on the Attempt counts the request as possibly sent
// (the header section goes to QUIC next). When the stream cannot be
// opened (a GOAWAY came, or the connection is gone), nothing was sent.
//
// A canceled context cancels the stream, until Done; an error then is
// the context's, as ClientConn.RoundTrip makes it. Informational
// responses are held to quic-go's own cap of maxInformational, as
// ClientConn.RoundTrip holds them, and to the Limit, which quic-go
// cannot apply (it ignores the hook's verdict): the response over either
// resets the stream with H3_EXCESSIVE_LOAD and fails the request with the
// *informational.LimitError InformationalError returns.
func (a *Attempt) RoundTrip(cc *http3.ClientConn, state *tls.ConnectionState, req *http.Request) (*http.Response, error) {
	res, err := a.roundTrip(cc, state, req)
	if err != nil && req.Context().Err() != nil {
		err = req.Context().Err()
	}
	return res, err
}

func (a *Attempt) roundTrip(cc *http3.ClientConn, state *tls.ConnectionState, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	str, err := cc.OpenRequestStream(ctx)
	if err != nil {
		return nil, err
	}
	a.own(str)
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { abort(str, http3.ErrCodeRequestCanceled) })
		a.mu.Lock()
		a.stop = stop
		a.mu.Unlock()
	}
	if a.markWrote() {
		a.send(fsm.EventFirstByteWritten)
	}
	trace := httptrace.ContextClientTrace(ctx) // StreamTrace's, with the caller's hooks beneath
	// As ClientConn.RoundTrip: a request that could not be sent in full
	// may still have been answered (a server that rejected it resets the
	// stream), so the response is read whatever the write said.
	if err := str.SendRequestHeader(req); err != nil {
		a.wroteRequest(httptrace.WroteRequestInfo{Err: err})
		wroteRequest(trace, err)
	} else {
		a.wroteRequest(httptrace.WroteRequestInfo{})
		wroteRequest(trace, nil)
		str.Close() // FIN: the whole request is out
	}
	for n := 1; ; n++ {
		res, err := str.ReadResponse()
		if err != nil {
			return nil, err
		}
		if res.StatusCode < 100 || res.StatusCode > 199 || res.StatusCode == http.StatusSwitchingProtocols {
			res.Request, res.TLS = req, state
			return res, nil
		}
		if n > maxInformational {
			abort(str, http3.ErrCodeExcessiveLoad)
			return nil, a.InformationalError()
		}
		a.got1xxResponse(res.StatusCode, textproto.MIMEHeader(res.Header))
		if err := a.info.Err(); err != nil {
			// Over the bound: the caller's hook does not see it, as over
			// HTTP/1.1 and HTTP/2.
			abort(str, http3.ErrCodeExcessiveLoad)
			return nil, err
		}
		if trace != nil && trace.Got1xxResponse != nil {
			trace.Got1xxResponse(res.StatusCode, textproto.MIMEHeader(res.Header))
		}
		if res.StatusCode == http.StatusContinue && trace != nil && trace.Got100Continue != nil {
			trace.Got100Continue()
		}
	}
}

// wroteRequest calls trace's WroteRequest hook, if any (the caller's:
// StreamTrace has none).
func wroteRequest(trace *httptrace.ClientTrace, err error) {
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
}

// abort resets both directions of str with code.
func abort(str *http3.RequestStream, code http3.ErrCode) {
	str.CancelWrite(quic.StreamErrorCode(code))
	str.CancelRead(quic.StreamErrorCode(code))
}
