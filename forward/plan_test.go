package forward

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/replaysafe/replaysafe"
)

// inbound builds an inbound request as net/http's server hands it over,
// already rewritten to upstream.
func inbound(proto, method, target, upstream string, header ...string) *http.Request {
	major, minor, _ := http.ParseHTTPVersion(proto)
	u, _ := url.Parse(upstream)
	r := &http.Request{
		Method: method, Proto: proto, ProtoMajor: major, ProtoMinor: minor,
		RequestURI: target, URL: u, Header: http.Header{}, Body: http.NoBody,
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

// TestPlanForward is the dispatch plan table: ingress version and mode × egress
// policy, with the target forms and the refusals.
func TestPlanForward(t *testing.T) {
	const plain, tls = "http://up.example/", "https://up.example/"
	ws := []string{"Connection", "Upgrade", "Upgrade", "websocket"}
	tests := []struct {
		name    string
		req     *http.Request
		egress  Egress
		mode    Mode
		version Version
		exact   bool
		proto   replaysafe.Protocol
		inForm  TargetForm
		form    TargetForm
		trailer bool
		status  int
	}{
		{name: "h1.1 GET to h1", req: inbound("HTTP/1.1", "GET", "/a", plain), egress: EgressHTTP1,
			version: VersionHTTP11, exact: true, proto: replaysafe.ProtocolHTTP1},
		{name: "h1.0 GET to h2", req: inbound("HTTP/1.0", "GET", "/a", plain), egress: EgressHTTP2,
			version: VersionHTTP2, exact: true, proto: replaysafe.ProtocolHTTP2},
		{name: "h2 POST to h1", req: inbound("HTTP/2.0", "POST", "/a", plain), egress: EgressHTTP1,
			version: VersionHTTP11, exact: true, proto: replaysafe.ProtocolHTTP1},
		{name: "h2 GET to h3", req: inbound("HTTP/2.0", "GET", "/a", tls), egress: EgressHTTP3,
			version: VersionHTTP3, exact: true, proto: replaysafe.ProtocolHTTP3},
		{name: "h3 GET to h2", req: inbound("HTTP/3.0", "GET", "/a", tls), egress: EgressHTTP2,
			version: VersionHTTP2, exact: true, proto: replaysafe.ProtocolHTTP2},
		{name: "h3 egress needs https", req: inbound("HTTP/1.1", "GET", "/a", plain), egress: EgressHTTP3,
			status: 500},
		{name: "negotiate over https is ALPN", req: inbound("HTTP/1.1", "GET", "/a", tls), egress: EgressNegotiate,
			version: VersionALPN, proto: replaysafe.ProtocolNegotiate},
		{name: "negotiate over http is HTTP/1.1", req: inbound("HTTP/1.1", "GET", "/a", plain), egress: EgressNegotiate,
			version: VersionHTTP11, exact: true, proto: replaysafe.ProtocolNegotiate},
		{name: "absolute-form inbound goes out origin-form", req: inbound("HTTP/1.1", "GET", "http://in.example/a", plain),
			egress: EgressHTTP1, proto: replaysafe.ProtocolHTTP1, version: VersionHTTP11, exact: true, inForm: TargetAbsolute, form: TargetOrigin},
		{name: "OPTIONS * stays asterisk", req: inbound("HTTP/1.1", "OPTIONS", "*", plain), egress: EgressHTTP2,
			version: VersionHTTP2, exact: true, proto: replaysafe.ProtocolHTTP2, inForm: TargetAsterisk, form: TargetAsterisk},
		{name: "h1.1 upgrade to h1", req: inbound("HTTP/1.1", "GET", "/ws", plain, ws...), egress: EgressHTTP1, proto: replaysafe.ProtocolHTTP1,
			mode: ModeUpgrade, version: VersionHTTP11, exact: true},
		{name: "upgrade token any case, in a list", req: inbound("HTTP/1.1", "GET", "/ws", plain, "Connection", "keep-alive, UPGRADE", "Upgrade", "websocket"),
			egress: EgressHTTP1, proto: replaysafe.ProtocolHTTP1, mode: ModeUpgrade, version: VersionHTTP11, exact: true},
		{name: "WebSocket upgrade to h2 is an extended CONNECT", req: inbound("HTTP/1.1", "GET", "/ws", plain, ws...), egress: EgressHTTP2,
			mode: ModeUpgrade, version: VersionHTTP2, exact: true, proto: replaysafe.ProtocolHTTP2},
		{name: "WebSocket upgrade to h3 is an extended CONNECT", req: inbound("HTTP/1.1", "GET", "/ws", tls, ws...), egress: EgressHTTP3,
			mode: ModeUpgrade, version: VersionHTTP3, exact: true, proto: replaysafe.ProtocolHTTP3},
		{name: "WebSocket upgrade to ALPN is an extended CONNECT", req: inbound("HTTP/1.1", "GET", "/ws", tls, ws...), egress: EgressNegotiate,
			mode: ModeUpgrade, version: VersionALPN, proto: replaysafe.ProtocolNegotiate},
		{name: "other upgrade to h2 refused", req: inbound("HTTP/1.1", "GET", "/x", plain, "Connection", "Upgrade", "Upgrade", "foo/1"), egress: EgressHTTP2,
			mode: ModeUpgrade, status: 501},
		{name: "upgrade to negotiate over http is h1", req: inbound("HTTP/1.1", "GET", "/ws", plain, ws...), egress: EgressNegotiate,
			mode: ModeUpgrade, version: VersionHTTP11, exact: true, proto: replaysafe.ProtocolNegotiate},
		{name: "Upgrade: h2c is for this hop, not the upstream", req: inbound("HTTP/1.1", "GET", "/", plain, "Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "Http2-Settings", "AAA"),
			egress: EgressHTTP2, version: VersionHTTP2, exact: true, proto: replaysafe.ProtocolHTTP2},
		{name: "Upgrade list less h2c", req: inbound("HTTP/1.1", "GET", "/", plain, "Connection", "Upgrade", "Upgrade", "h2c, websocket"),
			egress: EgressHTTP1, proto: replaysafe.ProtocolHTTP1, mode: ModeUpgrade, version: VersionHTTP11, exact: true},
		{name: "Upgrade without Connection: upgrade is ordinary", req: inbound("HTTP/1.1", "GET", "/ws", plain, "Upgrade", "websocket"),
			egress: EgressHTTP2, version: VersionHTTP2, exact: true, proto: replaysafe.ProtocolHTTP2},
		{name: "Upgrade in HTTP/1.0 is ignored (RFC 9110 §7.8)", req: inbound("HTTP/1.0", "GET", "/ws", plain, ws...),
			egress: EgressHTTP2, version: VersionHTTP2, exact: true, proto: replaysafe.ProtocolHTTP2},
		{name: "h2 extended CONNECT websocket to h1 is an Upgrade", req: inbound("HTTP/2.0", "CONNECT", "/ws", plain, ":protocol", "websocket"),
			egress: EgressHTTP1, proto: replaysafe.ProtocolHTTP1, mode: ModeExtendedConnect, version: VersionHTTP11, exact: true},
		{name: "h3 extended CONNECT websocket to h1 is an Upgrade", req: inbound("HTTP/3.0", "CONNECT", "/ws", tls, ":protocol", "websocket"),
			egress: EgressHTTP1, proto: replaysafe.ProtocolHTTP1, mode: ModeExtendedConnect, version: VersionHTTP11, exact: true},
		{name: "h3 extended CONNECT as quic-go's server hands it over", req: func() *http.Request {
			r := inbound("HTTP/3.0", "CONNECT", "/ws", tls)
			r.Proto = "websocket"
			return r
		}(), egress: EgressHTTP1, proto: replaysafe.ProtocolHTTP1, mode: ModeExtendedConnect, version: VersionHTTP11, exact: true},
		{name: "extended CONNECT to negotiate over http is h1", req: inbound("HTTP/2.0", "CONNECT", "/ws", plain, ":protocol", "websocket"),
			egress: EgressNegotiate, mode: ModeExtendedConnect, version: VersionHTTP11, exact: true, proto: replaysafe.ProtocolNegotiate},
		{name: "extended CONNECT to h2 goes on as one", req: inbound("HTTP/2.0", "CONNECT", "/ws", plain, ":protocol", "websocket"),
			egress: EgressHTTP2, mode: ModeExtendedConnect, version: VersionHTTP2, exact: true, proto: replaysafe.ProtocolHTTP2},
		{name: "extended CONNECT to h3 goes on as one", req: inbound("HTTP/3.0", "CONNECT", "/ws", tls, ":protocol", "websocket"),
			egress: EgressHTTP3, mode: ModeExtendedConnect, version: VersionHTTP3, exact: true, proto: replaysafe.ProtocolHTTP3},
		{name: "extended CONNECT to ALPN goes on as one (the Transport keeps it on HTTP/2)", req: inbound("HTTP/2.0", "CONNECT", "/ws", tls, ":protocol", "websocket"),
			egress: EgressNegotiate, mode: ModeExtendedConnect, version: VersionALPN, proto: replaysafe.ProtocolNegotiate},
		{name: "extended CONNECT of another protocol to h2 goes on", req: inbound("HTTP/2.0", "CONNECT", "/x", plain, ":protocol", "connect-udp"),
			egress: EgressHTTP2, mode: ModeExtendedConnect, version: VersionHTTP2, exact: true, proto: replaysafe.ProtocolHTTP2},
		{name: "extended CONNECT other protocol refused", req: inbound("HTTP/2.0", "CONNECT", "/x", plain, ":protocol", "connect-udp"),
			egress: EgressHTTP1, mode: ModeExtendedConnect, status: 501},
		{name: "h1 CONNECT refused", req: inbound("HTTP/1.1", "CONNECT", "up.example:443", plain),
			egress: EgressHTTP1, mode: ModeConnect, inForm: TargetAuthority, status: 501},
		{name: "h2 CONNECT refused", req: inbound("HTTP/2.0", "CONNECT", "up.example:443", plain),
			egress: EgressHTTP2, mode: ModeConnect, inForm: TargetAuthority, proto: replaysafe.ProtocolHTTP2, status: 501},
		{name: "h2 TE other than trailers is malformed", req: inbound("HTTP/2.0", "GET", "/a", plain, "Te", "gzip"),
			egress: EgressHTTP1, status: 400},
		{name: "h2 Connection is malformed", req: inbound("HTTP/2.0", "GET", "/a", plain, "Connection", "close"),
			egress: EgressHTTP1, status: 400},
		{name: "h2 TE trailers asks for trailers", req: inbound("HTTP/2.0", "GET", "/a", plain, "Te", "trailers"),
			egress: EgressHTTP1, proto: replaysafe.ProtocolHTTP1, version: VersionHTTP11, exact: true, trailer: true},
		{name: "h1.1 TE list with trailers", req: inbound("HTTP/1.1", "GET", "/a", plain, "Te", "gzip;q=0.5, Trailers"),
			egress: EgressHTTP2, version: VersionHTTP2, exact: true, proto: replaysafe.ProtocolHTTP2, trailer: true},
		{name: "h1.0 client cannot take trailers", req: inbound("HTTP/1.0", "GET", "/a", plain, "Te", "trailers"),
			egress: EgressHTTP1, proto: replaysafe.ProtocolHTTP1, version: VersionHTTP11, exact: true},
		{name: "no upstream scheme", req: inbound("HTTP/1.1", "GET", "/a", "ftp://up.example/"), egress: EgressHTTP1, status: 500},
		{name: "invalid egress", req: inbound("HTTP/1.1", "GET", "/a", plain), egress: egressCount, proto: replaysafe.ProtocolHTTP1, status: 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Plan(tc.req, tc.egress)
			if d.Status != tc.status {
				t.Fatalf("status %d (%s), want %d", d.Status, d.Reason, tc.status)
			}
			if d.Refused() != (d.Reason != "") {
				t.Errorf("Refused %v with reason %q", d.Refused(), d.Reason)
			}
			if d.Mode != tc.mode {
				t.Errorf("mode %v, want %v", d.Mode, tc.mode)
			}
			if d.InboundForm != tc.inForm || d.Form != tc.form {
				t.Errorf("forms %v→%v, want %v→%v", d.InboundForm, d.Form, tc.inForm, tc.form)
			}
			if tc.status != 0 {
				if d.Version != VersionNone {
					t.Errorf("refused plan has version %v", d.Version)
				}
				return
			}
			if d.Version != tc.version || d.Exact != tc.exact {
				t.Errorf("version %v exact %v, want %v exact %v", d.Version, d.Exact, tc.version, tc.exact)
			}
			if d.Protocol != tc.proto {
				t.Errorf("protocol %v, want %v", d.Protocol, tc.proto)
			}
			if d.Trailers != tc.trailer {
				t.Errorf("trailers %v, want %v", d.Trailers, tc.trailer)
			}
		})
	}
}

func TestForwardEgressNames(t *testing.T) {
	for e := Egress(0); e < egressCount; e++ {
		got, err := ParseEgress(e.String())
		if err != nil || got != e {
			t.Errorf("ParseEgress(%q) = %v, %v", e.String(), got, err)
		}
	}
	if _, err := ParseEgress("h4"); err == nil {
		t.Error("ParseEgress(h4) succeeded")
	}
	if s := Egress(9).String(); s != "Egress(9)" {
		t.Errorf("invalid egress prints %q", s)
	}
	if s := Mode(9).String(); s != "Mode(9)" {
		t.Errorf("invalid mode prints %q", s)
	}
}

func TestForwardUpstreamURL(t *testing.T) {
	tests := []struct{ base, in, want string }{
		{"http://up/", "/a?x=1", "http://up/a?x=1"},
		{"http://up", "/a", "http://up/a"},
		{"https://up/api/", "/a/b", "https://up/api/a/b"},
		{"https://up/api?k=v", "/a?x=1", "https://up/api/a?k=v&x=1"},
		{"https://up/api", "/", "https://up/api"},
	}
	for _, tc := range tests {
		b, _ := url.Parse(tc.base)
		in, _ := url.Parse(tc.in)
		if got := upstreamURL(b, in).String(); got != tc.want {
			t.Errorf("upstreamURL(%s, %s) = %s, want %s", tc.base, tc.in, got, tc.want)
		}
	}
}
