package h2

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RoundTrip sends req on a new stream and returns the response once its
// final header section has arrived; the body streams afterwards (and, for
// CONNECT, the request body keeps uploading: full duplex). It uses one
// reservation made by Reserve, whatever the outcome; without one it
// returns an *UnsentError wrapping ErrNotReserved. ev, if not nil,
// receives the stream's evidence (see StreamEvents).
//
// The request: Host (or URL.Host) becomes :authority; Method CONNECT
// without a ":protocol" key in Header is a plain CONNECT (no :scheme,
// no :path: a tunnel, the request body upstream and the response body
// downstream); with Header[":protocol"] it is an extended CONNECT (RFC
// 8441), which waits for the server's SETTINGS and fails with an
// *UnsentError wrapping ErrExtendedConnectUnsupported unless the server
// enabled it. Connection-specific fields are dropped (Connection: close
// and keep-alive, Keep-Alive, Proxy-Connection, Transfer-Encoding:
// chunked) or refused (Upgrade, other values); TE is sent only as
// "trailers"; a User-Agent is added unless Header has the key; Trailer
// keys are announced and req.Trailer is sent after the body. The request
// body is sent only once the server's SETTINGS have arrived; RoundTrip
// closes it, possibly after returning.
//
// Errors: *RequestError (invalid request, nothing sent), *UnsentError
// (nothing reached the socket), *StreamError, *GoAwayError,
// *RequestBodyError, the connection's error (*ReadError, *WriteError,
// *ConnectionError, *TimeoutError, ErrClosed), or the context's error.
func (cc *ClientConn) RoundTrip(req *http.Request, ev StreamEvents) (*http.Response, error) {
	head, err := prepareRequest(req, cc.cfg.compression)
	if err != nil {
		cc.Unreserve()
		closeRequestBody(req)
		return nil, err
	}
	// A small in-memory body (http.NewRequest sets GetBody for those) is
	// read now, so that it can leave with the HEADERS in one write and
	// without an upload goroutine.
	var early []byte
	if cl := head.contentLength; cl > 0 && cl <= earlyBodyMax && req.GetBody != nil && len(req.Trailer) == 0 {
		early = getChunk(int(cl))[:cl]
		if _, err := io.ReadFull(req.Body, early); err != nil {
			putChunk(early)
			cc.Unreserve()
			closeRequestBody(req)
			if err == io.ErrUnexpectedEOF || err == io.EOF {
				err = ErrBodyLength
			}
			return nil, &RequestBodyError{Err: err}
		}
	}
	ctx := req.Context()
	st := &stream{cc: cc, ev: ev, req: req, head: head, wakeResp: make(chan struct{}, 1)}
	if (head.hasBody() || len(req.Trailer) > 0) && early == nil {
		st.wakeSend = make(chan struct{}, 1)
	}
	cc.mu.Lock()
	for { // each pass waits for a slot or SETTINGS, or starts
		waiting, err := cc.m.start(time.Now(), st)
		if err != nil {
			cc.unlock()
			closeRequestBody(req)
			if early != nil {
				putChunk(early)
			}
			return nil, err
		}
		if !waiting {
			break
		}
		cc.unlock()
		select {
		case <-st.wakeResp:
		case <-ctx.Done():
			cc.mu.Lock()
			cc.m.cancel(time.Now(), st, ctx.Err())
			err := st.err
			cc.unlock()
			closeRequestBody(req)
			if early != nil {
				putChunk(early)
			}
			return nil, err
		}
		cc.mu.Lock()
	}
	switch {
	case early != nil:
		n, wait, err := cc.m.sendBodyUpTo(time.Now(), st, early, true, earlyQueueBytes)
		if err != nil || !wait {
			// All sent with the HEADERS (or the stream is already over).
			cc.m.uploadDone(st)
			st.bodyClosing = true
			cc.unlock()
			putChunk(early)
			closeRequestBody(req)
			cc.mu.Lock()
			break
		}
		st.wakeSend = make(chan struct{}, 1) // before any wake it should get: we hold the lock
		go cc.uploadRest(st, early, early[n:])
	case st.uploading:
		go cc.upload(st)
	}
	for { // each pass checks the stream, then waits for a change
		if st.phase >= respBody {
			rs := cc.responseState(st)
			cc.unlock()
			return cc.response(st, rs), nil
		}
		if st.err != nil && !st.deferred {
			err := st.err
			cc.unlock()
			return nil, err
		}
		cc.unlock()
		select {
		case <-st.wakeResp:
			cc.mu.Lock()
		case <-ctx.Done():
			cc.mu.Lock()
			cc.m.cancel(time.Now(), st, ctx.Err())
			if st.phase < respBody {
				st.quiet = true
				cc.unlock()
				return nil, ctx.Err()
			}
		}
	}
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// statusText holds "200 OK" and the like, so that a response does not
// build its Status.
var statusText [600]string

func init() {
	for code := 100; code < len(statusText); code++ {
		if t := http.StatusText(code); t != "" {
			statusText[code] = strconv.Itoa(code) + " " + t
		}
	}
}

// respState is what response needs of a stream, read under the lock.
type respState struct {
	status        int
	header        http.Header
	contentLength int64
	noBody        bool // the response has no body to read
}

// responseState snapshots st, whose final header section has arrived,
// and releases it at once when the response has no body. The caller
// holds the lock.
func (cc *ClientConn) responseState(st *stream) respState {
	rs := respState{status: int(st.status), header: st.header, contentLength: st.contentLength}
	ended := st.phase == respDone && st.buf.n == 0 && st.err == nil && st.trailer == nil
	if ended && rs.contentLength < 0 && st.head.method != http.MethodHead {
		rs.contentLength = 0
	}
	if ended || st.noContent {
		// No body: release the stream's buffers now (a response with no
		// content that has not ended yet completes on its own).
		rs.noBody = true
		st.bodyDone = true
		cc.m.discardBody(st)
	}
	return rs
}

// response builds the *http.Response of st from rs, without the lock:
// until RoundTrip returns it, nothing else touches st.res or the
// header.
func (cc *ClientConn) response(st *stream, rs respState) *http.Response {
	res := &http.Response{
		Status:        statusText[rs.status],
		StatusCode:    rs.status,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        rs.header,
		ContentLength: rs.contentLength,
		Request:       st.req,
		TLS:           cc.tlsState,
	}
	if res.Status == "" {
		res.Status = strconv.Itoa(rs.status)
	}
	if vv := rs.header["Trailer"]; len(vv) > 0 {
		res.Trailer = make(http.Header)
		for _, v := range vv {
			for k := range strings.SplitSeq(v, ",") {
				if k = strings.TrimSpace(k); k != "" {
					res.Trailer[canonicalHeader(strings.ToLower(k))] = nil
				}
			}
		}
	}
	if rs.noBody {
		res.Body = http.NoBody
		return res
	}
	st.res = res
	res.Body = st
	if st.head.gzip && strings.EqualFold(rs.header.Get("Content-Encoding"), "gzip") {
		res.Header.Del("Content-Encoding")
		res.Header.Del("Content-Length")
		res.ContentLength = -1
		res.Uncompressed = true
		res.Body = &gzipBody{body: st}
	}
	if ctx := st.req.Context(); ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { cc.cancelStream(st, ctx.Err()) })
		cc.mu.Lock()
		st.stopCtx = stop
		cc.mu.Unlock()
	}
	return res
}

// cancelStream resets st because its context ended.
func (cc *ClientConn) cancelStream(st *stream, err error) {
	cc.mu.Lock()
	if !st.bodyDone {
		cc.m.cancel(time.Now(), st, err)
	}
	cc.unlock()
}

// Read reads the response body (st is the body of its response).
func (st *stream) Read(p []byte) (int, error) {
	cc := st.cc
	cc.mu.Lock()
	for { // each pass reads or waits for data
		n, err, wait := cc.m.readBody(st, p)
		if !wait {
			if err != nil && !st.bodyDone {
				st.bodyDone = true
				if err == io.EOF && st.trailer != nil {
					if st.res.Trailer == nil {
						st.res.Trailer = make(http.Header, len(st.trailer))
					}
					for k, vv := range st.trailer {
						st.res.Trailer[k] = vv
					}
				}
				st.finishBody()
			}
			cc.unlock()
			return n, err
		}
		cc.mu.Unlock()
		select {
		case <-st.wakeResp:
		case <-st.req.Context().Done():
			cc.mu.Lock()
			cc.m.cancel(time.Now(), st, st.req.Context().Err())
			cc.unlock()
		}
		cc.mu.Lock()
	}
}

// Close closes the response body: an unfinished response is reset with
// CANCEL.
func (st *stream) Close() error {
	cc := st.cc
	cc.mu.Lock()
	if !st.bodyDone {
		st.bodyDone = true
		st.finishBody()
	}
	cc.m.closeBody(time.Now(), st)
	cc.unlock()
	return nil
}

// finishBody stops watching the request's context once the caller is
// done with the body. The caller holds the lock.
func (st *stream) finishBody() {
	if st.stopCtx != nil {
		st.stopCtx()
		st.stopCtx = nil
	}
}

// gzipBody decodes a gzip response body, lazily.
type gzipBody struct {
	body *stream
	zr   *gzip.Reader
	err  error
}

func (g *gzipBody) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		zr, err := gzip.NewReader(g.body)
		if err != nil {
			g.err = err
			return 0, err
		}
		g.zr = zr
	}
	n, err := g.zr.Read(p)
	if err != nil {
		g.err = err
	}
	return n, err
}

func (g *gzipBody) Close() error {
	g.err = ErrBodyClosed
	return g.body.Close()
}

// upload sends the request body (and trailers) of st; it runs on its own
// goroutine, which ends when the body is sent, fails, or is no longer
// wanted, and always closes the body.
func (cc *ClientConn) upload(st *stream) {
	req := st.req
	cl := st.head.contentLength
	var buf []byte
	if cl != 0 {
		size := chunkLarge
		if cl > 0 && cl < int64(size) {
			size = int(cl)
		}
		buf = getChunk(size)
		defer putChunk(buf)
	}
	var sent int64
	for { // each pass reads one chunk of body and sends it
		var n int
		var rerr error
		if cl != 0 && (cl < 0 || sent < cl) {
			p := buf
			if cl > 0 {
				p = buf[:min(int64(len(buf)), cl-sent)]
			}
			cc.mu.Lock()
			if err := cc.m.uploadStopped(st); err != nil {
				cc.mu.Unlock()
				break
			}
			st.inBodyRead = true
			cc.mu.Unlock()
			n, rerr = req.Body.Read(p)
			cc.mu.Lock()
			st.inBodyRead = false
			cc.mu.Unlock()
		} else {
			rerr = io.EOF
		}
		sent += int64(n)
		eof := rerr == io.EOF || (cl > 0 && sent == cl)
		var fail error
		switch {
		case rerr != nil && rerr != io.EOF:
			fail = rerr
		case rerr == io.EOF && cl > 0 && sent < cl:
			fail = ErrBodyLength
		}
		if fail != nil {
			cc.mu.Lock()
			cc.m.bodyFailed(time.Now(), st, fail)
			cc.unlock()
			break
		}
		trailers := eof && hasValues(req.Trailer)
		if !cc.sendBody(st, buf[:n], eof && !trailers) {
			break
		}
		if eof {
			if trailers {
				cc.sendTrailers(st)
			}
			break
		}
	}
	cc.mu.Lock()
	cc.m.uploadDone(st)
	closeBody := !st.bodyClosing
	st.bodyClosing = true
	cc.unlock()
	if closeBody {
		req.Body.Close()
	}
}

// earlyBodyMax bounds the request bodies RoundTrip reads itself (see
// RoundTrip): one pooled chunk.
const earlyBodyMax = chunkLarge

// uploadRest sends the rest of a body RoundTrip read early (rest, in
// buf) when the windows or the server's SETTINGS held it back.
func (cc *ClientConn) uploadRest(st *stream, buf, rest []byte) {
	cc.sendBody(st, rest, true)
	cc.mu.Lock()
	cc.m.uploadDone(st)
	closeBody := !st.bodyClosing
	st.bodyClosing = true
	cc.unlock()
	putChunk(buf)
	if closeBody {
		st.req.Body.Close()
	}
}

func hasValues(h http.Header) bool {
	for _, vv := range h {
		if len(vv) > 0 {
			return true
		}
	}
	return false
}

// sendBody hands p to the machine, waiting for window, SETTINGS or the
// writer as needed. It reports whether the upload may go on.
func (cc *ClientConn) sendBody(st *stream, p []byte, end bool) bool {
	for { // each pass queues what the windows allow, then waits
		cc.mu.Lock()
		n, wait, err := cc.m.sendBody(time.Now(), st, p, end)
		cc.unlock()
		if err != nil {
			return false
		}
		p = p[n:]
		if !wait {
			return true
		}
		if !cc.waitSend(st) {
			return false
		}
	}
}

// sendTrailers sends req.Trailer with END_STREAM.
func (cc *ClientConn) sendTrailers(st *stream) {
	for { // each pass tries, then waits
		cc.mu.Lock()
		wait, err := cc.m.sendTrailers(time.Now(), st, st.req.Trailer)
		cc.unlock()
		if err != nil || !wait || !cc.waitSend(st) {
			return
		}
	}
}

// waitSend waits for a change that may let st's upload proceed; it
// reports false when the request's context ended (the stream is then
// reset).
func (cc *ClientConn) waitSend(st *stream) bool {
	select {
	case <-st.wakeSend:
		return true
	case <-st.req.Context().Done():
		cc.mu.Lock()
		cc.m.cancel(time.Now(), st, st.req.Context().Err())
		cc.unlock()
		return false
	}
}
