package forward

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -linecomment -type Egress,Version,Mode,TargetForm -output enum_string.go

import (
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strings"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/plan"
)

// Egress is the forwarder's upstream protocol policy.
type Egress uint8

// Egress policies.
const (
	// EgressHTTP1 speaks HTTP/1.1 to the upstream, exactly. The zero
	// value and the default.
	EgressHTTP1 Egress = iota // h1
	// EgressHTTP2 speaks HTTP/2 to the upstream, exactly: h2 over TLS
	// for https, h2c with prior knowledge for http.
	EgressHTTP2 // h2
	// EgressHTTP3 speaks HTTP/3 to the upstream, exactly; the upstream
	// must be https.
	EgressHTTP3 // h3
	// EgressNegotiate lets ALPN choose HTTP/2 or HTTP/1.1 for https
	// upstreams; http upstreams get HTTP/1.1.
	EgressNegotiate // negotiate
)

// egressCount is the number of policies.
const egressCount = EgressNegotiate + 1

// ParseEgress returns the policy named s (h1, h2, h3 or negotiate), the
// inverse of its String.
func ParseEgress(s string) (Egress, error) {
	if e, ok := fsm.ParseEnum(s, egressCount, true); ok {
		return e, nil
	}
	return 0, fmt.Errorf("replaysafe: unknown egress %q (want h1, h2, h3 or negotiate)", s)
}

// Protocol returns the replaysafe protocol policy that speaks e.
func (e Egress) Protocol() replaysafe.Protocol {
	switch e {
	case EgressHTTP2:
		return replaysafe.ProtocolHTTP2
	case EgressHTTP3:
		return replaysafe.ProtocolHTTP3
	case EgressNegotiate:
		return replaysafe.ProtocolNegotiate
	}
	return replaysafe.ProtocolHTTP1
}

// Version is the HTTP version a forwarded request goes out with.
type Version uint8

// Forward versions.
const (
	// VersionNone: the request is refused and goes nowhere. The zero
	// value.
	VersionNone Version = iota // none
	// VersionHTTP11 is HTTP/1.1.
	VersionHTTP11 // HTTP/1.1
	// VersionHTTP2 is HTTP/2.
	VersionHTTP2 // HTTP/2
	// VersionHTTP3 is HTTP/3.
	VersionHTTP3 // HTTP/3
	// VersionALPN is HTTP/2 or HTTP/1.1, whichever ALPN selects.
	VersionALPN // ALPN(h2,http/1.1)
)

// Mode is what kind of exchange a forwarded request is.
type Mode uint8

// Forward modes.
const (
	// ModeOrdinary is a request and its response. The zero value.
	ModeOrdinary Mode = iota // ordinary
	// ModeUpgrade is an HTTP/1.1 Upgrade (RFC 9110 §7.8), such as a
	// WebSocket handshake: after a 101 response both directions are
	// tunnelled.
	ModeUpgrade // upgrade
	// ModeExtendedConnect is an HTTP/2 or HTTP/3 extended CONNECT
	// (RFC 8441, RFC 9220) carrying a :protocol.
	ModeExtendedConnect // extended-connect
	// ModeConnect is a classic CONNECT tunnel request (RFC 9110 §9.3.6).
	ModeConnect // connect
)

// TargetForm is a request target form (RFC 9112 §3.2).
type TargetForm uint8

// Target forms.
const (
	// TargetOrigin is an absolute path and query. The zero value.
	TargetOrigin TargetForm = iota // origin
	// TargetAbsolute is an absolute URI, as sent to a proxy.
	TargetAbsolute // absolute
	// TargetAuthority is host:port, for CONNECT.
	TargetAuthority // authority
	// TargetAsterisk is "*", for a server-wide OPTIONS.
	TargetAsterisk // asterisk
)

// Dispatch is the plan for one forwarded request: how it goes out, or
// why it does not.
type Dispatch struct {
	// Mode is the kind of exchange.
	Mode Mode
	// InboundForm is the target form the request arrived in.
	InboundForm TargetForm
	// Form is the target form it goes out in: origin-form (or asterisk
	// for OPTIONS *); the Transport writes absolute-form only to an HTTP
	// proxy of its own.
	Form TargetForm
	// Version is the HTTP version of the egress.
	Version Version
	// Exact reports whether Version is the only one the egress may speak
	// (false when ALPN chooses).
	Exact bool
	// Protocol is the replaysafe protocol policy of the egress; it is
	// part of the Transport's pool identity, with the upstream's scheme
	// and authority.
	Protocol replaysafe.Protocol
	// Legs is the Transport's dispatch plan for the upstream: the
	// protocols it may speak, in order (fsm/plan).
	Legs []plan.Leg
	// Upgrade is the Upgrade field value to forward in ModeUpgrade.
	Upgrade string
	// Trailers reports whether the egress asks for trailers (TE:
	// trailers): the client asked and can receive them.
	Trailers bool
	// Status is zero when the request is forwarded, else the status to
	// answer with, and Reason says why.
	Status int
	// Reason explains a refusal in one line.
	Reason string
}

// Refused reports whether the plan refuses the request.
func (d Dispatch) Refused() bool { return d.Status != 0 }

func refuse(d Dispatch, status int, format string, args ...any) Dispatch {
	d.Status, d.Reason = status, fmt.Sprintf(format, args...)
	d.Version = VersionNone
	return d
}

// Plan returns the dispatch plan of req, an inbound request whose URL was
// already rewritten to the upstream (scheme and host set), under egress
// policy e. It reads req only: no I/O, no clock. req.Proto* is the
// ingress version, req.RequestURI the inbound target, and an HTTP/2 or
// HTTP/3 extended CONNECT carries its :protocol as net/http's server
// does, in req.Header[":protocol"], or as quic-go's does, in req.Proto.
func Plan(req *http.Request, e Egress) Dispatch {
	d := Dispatch{Protocol: e.Protocol()}
	switch {
	case req.RequestURI == "*":
		d.InboundForm, d.Form = TargetAsterisk, TargetAsterisk
	case req.Method == http.MethodConnect && req.ProtoMajor < 2:
		d.InboundForm = TargetAuthority
	case strings.Contains(req.RequestURI, "://"):
		d.InboundForm = TargetAbsolute
	}
	protocol := ""
	if req.ProtoMajor >= 2 && req.Method == http.MethodConnect {
		d.InboundForm = TargetAuthority
		protocol = req.Header.Get(":protocol")
		if protocol == "" && req.ProtoMajor == 3 && req.Proto != "HTTP/3.0" && req.Proto != "HTTP/3" {
			protocol = req.Proto // quic-go's server puts :protocol there
		}
		if protocol != "" {
			d.InboundForm = TargetOrigin // :path carries the target (RFC 8441 §4)
			d.Mode, d.Upgrade = ModeExtendedConnect, protocol
		}
	}
	if req.Method == http.MethodConnect && protocol == "" {
		d.Mode = ModeConnect
		return refuse(d, http.StatusNotImplemented, "CONNECT tunnels are not forwarded")
	}
	if e >= egressCount {
		return refuse(d, http.StatusInternalServerError, "invalid egress policy %v", e)
	}
	if req.URL == nil || req.URL.Host == "" {
		return refuse(d, http.StatusInternalServerError, "no upstream host")
	}
	scheme := req.URL.Scheme
	if scheme != "http" && scheme != "https" {
		return refuse(d, http.StatusInternalServerError, "upstream scheme %q is neither http nor https", scheme)
	}

	// The egress version is the Transport's dispatch plan for the
	// upstream (fsm/plan), the same function its RoundTrip carries out.
	tp := plan.Make(plan.Input{Policy: plan.Policy(d.Protocol), HTTPS: scheme == "https"})
	if tp.Err != nil {
		return refuse(d, http.StatusInternalServerError, "%v egress to an %s upstream: %v", e, scheme, tp.Err)
	}
	d.Legs = tp.Legs
	switch first := tp.First(); {
	case first.Next == plan.FallbackALPN:
		d.Version = VersionALPN
	case first.Proto == fsm.ProtoH2:
		d.Version, d.Exact = VersionHTTP2, true
	case first.Proto == fsm.ProtoH3:
		d.Version, d.Exact = VersionHTTP3, true
	default:
		d.Version, d.Exact = VersionHTTP11, true
	}

	if d.Mode == ModeExtendedConnect {
		if d.Version != VersionHTTP11 {
			// HTTP/2, HTTP/3 or ALPN egress (the Transport's plan keeps an
			// extended CONNECT off HTTP/1.1): it goes on as it came, any
			// protocol, with its :protocol (RFC 8441 §4, RFC 9220 §3).
			return d
		}
		// RFC 8441 §5: a WebSocket over an HTTP/2 (or, RFC 9220, HTTP/3)
		// stream becomes an HTTP/1.1 Upgrade handshake upstream.
		if !strings.EqualFold(protocol, "websocket") {
			return refuse(d, http.StatusNotImplemented, "extended CONNECT with :protocol %q goes to HTTP/1.1 egress only as a WebSocket", protocol)
		}
		d.Upgrade = "websocket"
		return d
	}

	if req.ProtoMajor >= 2 {
		// RFC 9113 §8.2.2, RFC 9114 §4.2: connection-specific fields make
		// the request malformed; TE may carry "trailers" alone.
		if len(req.Header.Values("Connection")) > 0 || len(req.Header.Values("Upgrade")) > 0 ||
			len(req.Header.Values("Keep-Alive")) > 0 || len(req.Header.Values("Proxy-Connection")) > 0 ||
			len(req.Header.Values("Transfer-Encoding")) > 0 {
			return refuse(d, http.StatusBadRequest, "connection-specific header field in an HTTP/%d request", req.ProtoMajor)
		}
		for _, v := range req.Header.Values("Te") {
			if !strings.EqualFold(strings.TrimSpace(v), "trailers") {
				return refuse(d, http.StatusBadRequest, "TE %q in an HTTP/%d request (only \"trailers\" is allowed)", v, req.ProtoMajor)
			}
		}
	}
	d.Trailers = req.ProtoAtLeast(1, 1) && teTrailers(req.Header)

	// RFC 9110 §7.8: Upgrade counts only when Connection names it, and a
	// server ignores it in an HTTP/1.0 request.
	// "h2c" asks this hop to switch (RFC 7540 §3.2), never the upstream.
	if up := upgradeTokens(req.Header); up != "" &&
		connectionNames(req.Header, "upgrade") && req.ProtoMajor == 1 && req.ProtoMinor >= 1 {
		d.Mode, d.Upgrade = ModeUpgrade, up
		if d.Version != VersionHTTP11 && !strings.EqualFold(up, "websocket") {
			// RFC 8441 §5 and RFC 9220 carry a WebSocket over an HTTP/2 or
			// HTTP/3 extended CONNECT; other upgrades have no such form.
			return refuse(d, http.StatusNotImplemented,
				"Upgrade %q needs HTTP/1.1 egress, not %v (only a WebSocket becomes an extended CONNECT)", up, d.Version)
		}
		if d.Version != VersionHTTP11 {
			d.Upgrade = "websocket"
		}
	}
	return d
}

// connectionOptions yields, in place, the options every Connection
// field line of h names (RFC 9110 §7.6.1: a comma-separated list, any
// case, optional whitespace, over any number of lines). A peer chooses
// how many: up to the header limit.
func connectionOptions(h http.Header) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, v := range h.Values("Connection") {
			for tok := range strings.SplitSeq(v, ",") {
				if tok = strings.TrimSpace(tok); tok != "" && !yield(tok) {
					return
				}
			}
		}
	}
}

// connectionNames reports whether a Connection field of h names option,
// in any case.
func connectionNames(h http.Header, option string) bool {
	for tok := range connectionOptions(h) {
		if strings.EqualFold(tok, option) {
			return true
		}
	}
	return false
}

// teTrailers reports whether a TE field lists "trailers" (RFC 9110
// §10.1.4).
func teTrailers(h http.Header) bool {
	for _, v := range h.Values("Te") {
		for _, tok := range strings.Split(v, ",") {
			tok, _, _ = strings.Cut(tok, ";")
			if strings.EqualFold(strings.TrimSpace(tok), "trailers") {
				return true
			}
		}
	}
	return false
}

// upstreamURL joins the upstream base u with the inbound target: u's
// path is a prefix of the inbound path, u's query comes first.
func upstreamURL(u *url.URL, in *url.URL) *url.URL {
	out := *in
	out.Scheme, out.Host, out.User = u.Scheme, u.Host, nil
	out.Opaque = ""
	switch {
	case u.Path == "" || u.Path == "/":
	case in.Path == "" || in.Path == "/":
		out.Path, out.RawPath = u.Path, u.RawPath
	default:
		out.Path = strings.TrimSuffix(u.Path, "/") + "/" + strings.TrimPrefix(in.Path, "/")
		out.RawPath = ""
	}
	switch {
	case u.RawQuery == "":
	case in.RawQuery == "":
		out.RawQuery = u.RawQuery
	default:
		out.RawQuery = u.RawQuery + "&" + in.RawQuery
	}
	return &out
}

// upgradeTokens returns the Upgrade protocols of h, less "h2c", as one
// field value.
func upgradeTokens(h http.Header) string {
	var keep []string
	for _, v := range h.Values("Upgrade") {
		for _, tok := range strings.Split(v, ",") {
			tok = strings.TrimSpace(tok)
			if tok != "" && !strings.EqualFold(tok, "h2c") {
				keep = append(keep, tok)
			}
		}
	}
	return strings.Join(keep, ", ")
}
