// Package forward is a streaming reverse proxy on a replaysafe Transport:
// an http.Handler that forwards each inbound request to one upstream and
// its response back, with replaysafe's dispatch rules deciding every
// resend.
//
// The forwarder never collects a request body to enable a retry: a
// forwarded body is one-shot, so the Transport resends it only when the
// evidence says the upstream did not process it (nothing written, a
// request handed back untouched, HTTP/2 REFUSED_STREAM or a GOAWAY
// boundary, HTTP/3 H3_REQUEST_REJECTED), and a request without a body
// also when the failure was ambiguous but the method is idempotent. A
// failure the rules do not resend reaches the client as 502 Bad Gateway
// with a Replaysafe-Rule header naming the rule; a phase deadline
// (the acquisition deadline among them) as 504 Gateway Timeout.
//
// Each request goes through three steps:
//
//  1. The upstream target: Options.Upstream, or Options.Director, then
//     Options.OnRequest, which may change the request or refuse it.
//  2. Its dispatch plan (Plan): the egress target form, the HTTP version
//     the egress speaks and whether it is exact or negotiated, and the
//     mode (ordinary, HTTP/1.1 Upgrade, extended CONNECT); or a refusal
//     with the status to send. A request is never handed to an encoder
//     that cannot represent it.
//  3. Header cleanup (CleanRequestHeader, CleanResponseHeader): the
//     fields named by Connection and the hop-by-hop fields go (RFC 9110
//     §7.6.1), TE is regenerated for the egress, and Via (RFC 9110
//     §7.6.3), Forwarded (RFC 7239) and X-Forwarded-For are added as
//     configured.
//
// docs/forwarding.md has the translation matrix (ingress × egress × mode)
// and the fault comparison beside httputil.ReverseProxy.
package forward
