package forward

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
)

// RuleHeader is the response header field that names the replaysafe rule
// (its ID, such as RS18) behind a 502 or 504 the forwarder sends.
const RuleHeader = "Replaysafe-Rule"

// DefaultViaName is the pseudonym the forwarder adds to Via when
// Options.ViaName is empty.
const DefaultViaName = "replaysafe"

// Options configures a forwarder. Upstream or Director is required; every
// other field documents its default.
type Options struct {
	// Upstream is the origin every request goes to: its scheme and host
	// replace the inbound ones, its path is a prefix of the inbound path
	// and its query comes before the inbound query.
	Upstream *url.URL
	// Director, if set, replaces Upstream: it rewrites the outbound
	// request (a clone of the inbound one, URL and header included) so
	// that its URL names the upstream, scheme and host set.
	Director func(*http.Request)
	// PreserveHost keeps the inbound Host for the upstream request;
	// by default the upstream's host is sent.
	PreserveHost bool

	// OnRequest, if set, runs after the rewrite and before the dispatch
	// plan: it may change the outbound request, or refuse it by returning
	// an error. A *StatusError chooses the status; any other error
	// answers 403 Forbidden.
	OnRequest func(*http.Request) error

	// Egress is the upstream protocol policy: exactly HTTP/1.1 (the
	// default), HTTP/2 or HTTP/3, or negotiated by ALPN. It must be what
	// the Transport speaks: when Transport is nil the forwarder makes one
	// with Protocol Egress.Protocol().
	Egress Egress
	// Transport sends the forwarded requests. nil means
	// New(TransportOptions) with Protocol set from Egress,
	// made once by New. With a Transport of the caller's, whose Observer
	// the forwarder cannot see, the access log counts attempts only for
	// failed calls (from *replaysafe.Error).
	Transport *replaysafe.Transport
	// TransportOptions configures the Transport made when Transport is
	// nil; its Protocol is replaced by Egress.Protocol().
	TransportOptions replaysafe.Options

	// ViaName is the pseudonym added to Via on requests and responses
	// (RFC 9110 §7.6.3); empty means DefaultViaName.
	ViaName string
	// DisableVia stops adding Via.
	DisableVia bool
	// Forwarded appends a Forwarded element (RFC 7239) naming the client
	// address, the inbound host and protocol. Off by default.
	Forwarded bool
	// XForwardedFor appends the client address to X-Forwarded-For and
	// sets X-Forwarded-Host and X-Forwarded-Proto. Off by default.
	XForwardedFor bool
	// TrustForwarded keeps the inbound Forwarded and X-Forwarded-* fields
	// (appending to them); by default they are removed, since any client
	// can write them.
	TrustForwarded bool

	// Logger receives one line per request (method, target, inbound and
	// upstream protocol, mode, attempts, rule, status, duration, and the
	// error if any). nil logs nothing.
	Logger *slog.Logger
}

// StatusError is an error OnRequest returns to refuse a request with a
// chosen status.
type StatusError struct {
	// Status is the response status code.
	Status int
	// Reason is the response body, one line.
	Reason string
}

// Error returns the status and the reason.
func (e *StatusError) Error() string {
	return fmt.Sprintf("replaysafe: forward refused with %d: %s", e.Status, e.Reason)
}

// Forwarder is a streaming reverse proxy: an http.Handler that forwards
// each request to the upstream through a Transport, and its response
// back. Make one with New.
//
// The forwarder never collects a request body to enable a retry: a
// forwarded body is one-shot, so the Transport resends it only when the
// evidence says the upstream did not process it (nothing written, a
// request handed back untouched, HTTP/2 REFUSED_STREAM or a GOAWAY
// boundary, HTTP/3 H3_REQUEST_REJECTED), and a request without a body
// also when the failure was ambiguous but the method is idempotent. A
// failure the rules do not resend reaches the client as 502 Bad Gateway
// with a RuleHeader naming the rule; a phase deadline (the
// acquisition deadline among them) as 504 Gateway Timeout.
//
// Each request goes through three steps:
//
//  1. The upstream target: Options.Upstream, or
//     Options.Director, then Options.OnRequest, which may
//     change the request or refuse it.
//  2. Its dispatch plan (Plan): the egress target form, the HTTP
//     version the egress speaks and whether it is exact or negotiated,
//     and the mode (ordinary, HTTP/1.1 Upgrade, extended CONNECT); or a
//     refusal with the status to send. A request is never handed to an
//     encoder that cannot represent it.
//  3. Header cleanup: the fields named by Connection and the hop-by-hop
//     fields go (RFC 9110 §7.6.1), TE is regenerated for the egress, and
//     Via (RFC 9110 §7.6.3), Forwarded (RFC 7239) and X-Forwarded-For are
//     added as configured.
type Forwarder struct {
	opt      Options
	rt       *replaysafe.Transport
	via      string
	attempts sync.Map // *http.Request (outbound) -> *int, when the forwarder owns the Transport
}

// New returns a forwarder configured by o. It panics if o has neither
// Upstream nor Director, which is a programming error.
func New(o Options) *Forwarder {
	if o.Upstream == nil && o.Director == nil {
		panic("replaysafe: Options needs Upstream or Director")
	}
	h := &Forwarder{opt: o, rt: o.Transport, via: o.ViaName}
	if h.via == "" {
		h.via = DefaultViaName
	}
	if h.rt == nil {
		to := o.TransportOptions
		to.Protocol = o.Egress.Protocol()
		prev := to.Observer.OnAttempt
		to.Observer.OnAttempt = func(r replaysafe.AttemptReport) {
			if n, ok := h.attempts.Load(r.Request); ok {
				*n.(*int) = r.Number
			}
			if prev != nil {
				prev(r)
			}
		}
		h.rt = replaysafe.New(to)
	}
	return h
}

// Transport returns the Transport the forwarder sends with.
func (h *Forwarder) Transport() *replaysafe.Transport { return h.rt }

// exchange is what the access log line reports about one request.
type exchange struct {
	start    time.Time
	upstream string // the upstream protocol, such as HTTP/2.0
	attempts int
	rule     string
	status   int
	err      error
	plan     Dispatch
}

// ServeHTTP forwards r to the upstream and its response to w.
func (h *Forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{start: time.Now()}
	defer h.log(r, x)
	// The upload may still be running when the response starts: without
	// full duplex net/http's HTTP/1 server would close the inbound body
	// then, cutting the forwarded request short.
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		x.err = err
	}

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Trailer = nil
	if len(r.Trailer) > 0 && r.Body != nil {
		// The announced trailers go out announced; their values are
		// copied when the inbound body ends (net/http's server fills
		// r.Trailer then, quic-go's replaces it).
		out.Trailer = make(http.Header, len(r.Trailer))
		for k := range r.Trailer {
			out.Trailer[k] = nil
		}
		out.Body = &trailerBody{ReadCloser: r.Body, in: r, out: out.Trailer}
	}
	out.Close = false
	if h.opt.Director != nil {
		h.opt.Director(out)
	} else {
		out.URL = upstreamURL(h.opt.Upstream, r.URL)
		if r.RequestURI == "*" {
			out.URL.Path, out.URL.RawPath = "*", ""
		}
	}
	if !h.opt.PreserveHost {
		out.Host = ""
	}
	if h.opt.OnRequest != nil {
		if err := h.opt.OnRequest(out); err != nil {
			var se *StatusError
			if errors.As(err, &se) {
				h.refuse(w, x, se.Status, se.Reason)
			} else {
				h.refuse(w, x, http.StatusForbidden, "request refused")
			}
			x.err = err
			return
		}
	}
	d := Plan(out, h.opt.Egress)
	x.plan = d
	if d.Refused() {
		h.refuse(w, x, d.Status, d.Reason)
		return
	}
	h.addForwarding(out, r)
	cleanRequestHeader(out.Header, d)
	if out.ContentLength < 0 && len(r.Trailer) == 0 && r.ProtoMajor >= 2 &&
		(out.Method == http.MethodGet || out.Method == http.MethodHead) {
		out.Body, out.ContentLength = peekEmpty(out.Body)
	}
	if out.ContentLength == 0 && len(r.Trailer) == 0 {
		// A bodyless request (HTTP/1 Content-Length: 0 or none, HTTP/2
		// and HTTP/3 END_STREAM on the header section) goes out as one,
		// so that the Transport knows it has no body to lose.
		if out.Body != nil && out.Body != http.NoBody {
			out.Body.Close()
		}
		out.Body = http.NoBody
	}

	var wsKey string
	var upload *io.PipeWriter // the client's bytes after the 101, for an Upgrade sent as an extended CONNECT
	switch {
	case d.Mode == ModeExtendedConnect && d.Version == VersionHTTP11:
		wsKey = websocketHandshake(out)
	case d.Mode == ModeExtendedConnect:
		out.Proto, out.ProtoMajor, out.ProtoMinor = "", 0, 0 // quic-go's server put the :protocol there
	case d.Mode == ModeUpgrade && d.Version != VersionHTTP11:
		wsKey = r.Header.Get("Sec-Websocket-Key")
		var pr *io.PipeReader
		pr, upload = io.Pipe()
		defer upload.Close()
		out.Method, out.Body, out.ContentLength = http.MethodConnect, pr, -1
	}

	out = out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
			relay1xx(w, code, http.Header(header), d)
			return nil
		},
	}))

	var n int
	if h.opt.Transport == nil {
		h.attempts.Store(out, &n)
		defer h.attempts.Delete(out)
	}
	resp, err := h.rt.RoundTrip(out)
	if err != nil {
		h.fail(w, r, x, err)
		return
	}
	x.upstream = resp.Proto
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols && d.Mode == ModeExtendedConnect:
		h.extendedConnect(w, r, resp, d, x, wsKey)
		x.attempts = n
		return
	case resp.StatusCode == http.StatusSwitchingProtocols:
		h.upgrade(w, resp, d, x)
		x.attempts = n
		return
	case upload != nil && resp.StatusCode == http.StatusOK:
		h.upgradeOverConnect(w, resp, d, x, wsKey, upload)
		x.attempts = n
		return
	}
	h.respond(w, r, resp, d, x)
	x.attempts = n
}

// relay1xx passes an interim response on to the client (103 Early Hints,
// 102 Processing, ...), cleaned like a final one. 100 Continue stays
// with net/http's server, which sends its own when the handler reads the
// body; 101 is the upgrade's.
func relay1xx(w http.ResponseWriter, code int, header http.Header, d Dispatch) {
	if code == http.StatusContinue || code == http.StatusSwitchingProtocols {
		return
	}
	header = header.Clone()
	cleanResponseHeader(header, code, d)
	wh := w.Header()
	for k, vv := range header {
		wh[k] = vv
	}
	w.WriteHeader(code)
	for k := range header {
		delete(wh, k) // net/http keeps the header for the final response
	}
}

// respond copies an upstream response to the client: its cleaned header,
// its body as it arrives, and its trailers.
func (h *Forwarder) respond(w http.ResponseWriter, r *http.Request, resp *http.Response, d Dispatch, x *exchange) {
	defer resp.Body.Close()

	cleanResponseHeader(resp.Header, resp.StatusCode, d)
	if !h.opt.DisableVia {
		resp.Header.Add("Via", viaValue(resp.ProtoMajor, resp.ProtoMinor, h.via))
	}
	wh := w.Header()
	for k, vv := range resp.Header {
		wh[k] = vv
	}
	if len(resp.Trailer) > 0 {
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
		}
		wh["Trailer"] = []string{strings.Join(names, ", ")}
		wh.Del("Content-Length") // trailers need chunked over HTTP/1.1
	}
	w.WriteHeader(resp.StatusCode)
	x.status = resp.StatusCode
	if d.Mode == ModeExtendedConnect {
		// A tunnel: the client sends nothing until it has the 200.
		if err := http.NewResponseController(w).Flush(); err != nil {
			x.err = err
			return
		}
	}
	if err := copyFlushing(w, resp.Body); err != nil {
		x.err = err
		if r.Context().Err() == nil {
			// The upstream body failed after the status went out: abort
			// the client's response so that it is not taken as complete.
			resp.Body.Close()
			panic(http.ErrAbortHandler)
		}
	}
	resp.Body.Close() // ends the attempt, so the attempt count is final
	for k, vv := range resp.Trailer {
		wh[http.TrailerPrefix+k] = vv
	}
}

// trailerBody is an inbound body that copies the inbound request's
// trailers to the outbound request when it ends.
type trailerBody struct {
	io.ReadCloser
	in  *http.Request
	out http.Header
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		for k, vv := range b.in.Trailer {
			b.out[k] = vv
		}
	}
	return n, err
}

// peekEmpty reads the first byte of an HTTP/2 or HTTP/3 GET or HEAD body
// of unknown length: a stream that ends at once (quic-go's server cannot
// tell END_STREAM on the header section apart) has no body and returns
// length 0, so that the Transport may resend it; otherwise the body comes
// back whole, the byte put in front, with length -1.
func peekEmpty(body io.ReadCloser) (io.ReadCloser, int64) {
	var b [1]byte
	n, err := io.ReadFull(body, b[:])
	if n == 0 && err == io.EOF {
		return body, 0
	}
	return &peekedBody{Reader: io.MultiReader(bytes.NewReader(b[:n]), errReader{err}, body), Closer: body}, -1
}

// peekedBody is a body whose first bytes were read ahead.
type peekedBody struct {
	io.Reader
	io.Closer
}

// errReader returns err once, or nothing (io.EOF) when err is nil, so that
// a failed peek fails the body where it failed.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// copyFlushing copies the upstream body to the client, flushing after
// every read so that the response streams.
func copyFlushing(w http.ResponseWriter, body io.Reader) error {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return fmt.Errorf("replaysafe: forward: writing the response to the client: %w", werr)
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return fmt.Errorf("replaysafe: forward: flushing the response to the client: %w", ferr)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("replaysafe: forward: reading the upstream response: %w", err)
		}
	}
}

// addForwarding removes the untrusted inbound forwarding fields and adds
// Via, Forwarded and X-Forwarded-* as configured.
func (h *Forwarder) addForwarding(out, in *http.Request) {
	if !h.opt.TrustForwarded {
		for _, f := range forwardedFields {
			out.Header.Del(f)
		}
	}
	proto := "http"
	if in.TLS != nil {
		proto = "https"
	}
	if h.opt.Forwarded {
		out.Header.Add("Forwarded", forwardedElement(in.RemoteAddr, proto, in.Host))
	}
	if h.opt.XForwardedFor {
		if ip := clientIP(in.RemoteAddr); ip.IsValid() {
			if prior := out.Header.Values("X-Forwarded-For"); len(prior) > 0 {
				out.Header.Set("X-Forwarded-For", strings.Join(prior, ", ")+", "+ip.String())
			} else {
				out.Header.Set("X-Forwarded-For", ip.String())
			}
		}
		out.Header.Set("X-Forwarded-Host", in.Host)
		out.Header.Set("X-Forwarded-Proto", proto)
	}
	if !h.opt.DisableVia {
		out.Header.Add("Via", viaValue(in.ProtoMajor, in.ProtoMinor, h.via))
	}
}

// refuse answers a request the forwarder does not send.
func (h *Forwarder) refuse(w http.ResponseWriter, x *exchange, status int, reason string) {
	x.status = status
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, "%d %s: %s\n", status, http.StatusText(status), reason)
}

// StatusOf returns the status the forwarder answers for a RoundTrip error
// err: 504 Gateway Timeout when a phase deadline decided (the acquisition
// deadline, or another of the Transport's limits), else 502 Bad Gateway;
// and the rule that decided, if err names one.
func StatusOf(err error) (int, fsm.Rule, bool) {
	var re *replaysafe.Error
	ok := errors.As(err, &re)
	var te *replaysafe.TimeoutError
	if errors.As(err, &te) || ok && re.Rule == fsm.RuleTimeout {
		if ok {
			return http.StatusGatewayTimeout, re.Rule, true
		}
		return http.StatusGatewayTimeout, fsm.RuleNone, false
	}
	if ok {
		return http.StatusBadGateway, re.Rule, true
	}
	return http.StatusBadGateway, fsm.RuleNone, false
}

// fail answers a request whose upstream call failed.
func (h *Forwarder) fail(w http.ResponseWriter, r *http.Request, x *exchange, err error) {
	x.err = err
	var re *replaysafe.Error
	if errors.As(err, &re) {
		x.attempts = re.Attempts
	}
	if r.Context().Err() != nil {
		x.status = 499 // the client went away; nobody reads an answer
		if errors.As(err, &re) {
			x.rule = re.Rule.ID()
		}
		return
	}
	status, rule, named := StatusOf(err)
	reason := "upstream request failed"
	if named {
		x.rule = rule.ID()
		w.Header().Set(RuleHeader, rule.ID())
		reason = fmt.Sprintf("upstream request failed: replaysafe rule %s (%s), %d attempt(s)", rule.ID(), rule, re.Attempts)
	}
	h.refuse(w, x, status, reason)
}

// upgrade tunnels a 101 response: it writes it to the hijacked client
// connection and copies both directions until either ends.
func (h *Forwarder) upgrade(w http.ResponseWriter, resp *http.Response, d Dispatch, x *exchange) {
	up, ok := resp.Body.(io.ReadWriteCloser)
	if !ok || d.Mode != ModeUpgrade {
		resp.Body.Close()
		x.err = errors.New("replaysafe: forward: 101 response to a request that asked for no upgrade")
		h.refuse(w, x, http.StatusBadGateway, "unexpected 101 response from the upstream")
		return
	}
	defer up.Close()
	cleanResponseHeader(resp.Header, resp.StatusCode, d)
	h.switchProtocols(w, x, resp, up)
}

// switchProtocols answers the client 101 Switching Protocols with resp's
// header (cleaned by the caller; Via added here) on its hijacked
// connection, and tunnels that connection into up until either side
// ends.
func (h *Forwarder) switchProtocols(w http.ResponseWriter, x *exchange, resp *http.Response, up io.ReadWriteCloser) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		x.err = fmt.Errorf("replaysafe: forward: hijacking the client connection for the upgrade: %w", err)
		h.refuse(w, x, http.StatusInternalServerError, "cannot take over the client connection")
		return
	}
	defer conn.Close()
	if !h.opt.DisableVia {
		resp.Header.Add("Via", viaValue(resp.ProtoMajor, resp.ProtoMinor, h.via))
	}
	x.status = http.StatusSwitchingProtocols
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	if err := resp.Header.Write(brw); err != nil {
		x.err = err
		return
	}
	brw.WriteString("\r\n")
	if err := brw.Flush(); err != nil {
		x.err = fmt.Errorf("replaysafe: forward: writing the 101 response to the client: %w", err)
		return
	}
	x.err = tunnel(conn, brw.Reader, up)
}

// tunnel copies client→upstream and upstream→client until one direction
// ends, then closes both.
func tunnel(client net.Conn, clientBuf *bufio.Reader, up io.ReadWriteCloser) error {
	errc := make(chan error, 2)
	go func() {
		_, err := io.Copy(up, clientBuf)
		errc <- err
	}()
	go func() {
		_, err := io.Copy(client, up)
		errc <- err
	}()
	err := <-errc
	client.Close()
	up.Close()
	<-errc
	return err
}

// log writes the access log line.
func (h *Forwarder) log(r *http.Request, x *exchange) {
	if h.opt.Logger == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("target", r.RequestURI),
		slog.String("proto", r.Proto),
		slog.String("upstream", x.upstream),
		slog.String("mode", x.plan.Mode.String()),
		slog.Int("attempts", x.attempts),
		slog.String("rule", x.rule),
		slog.Int("status", x.status),
		slog.Duration("duration", time.Since(x.start)),
	}
	level := slog.LevelInfo
	if x.err != nil {
		attrs = append(attrs, slog.String("error", x.err.Error()))
		if x.status >= 500 {
			level = slog.LevelWarn
		}
	}
	h.opt.Logger.LogAttrs(context.Background(), level, "forward", attrs...)
}
