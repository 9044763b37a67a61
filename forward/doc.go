// Package forward is a streaming reverse proxy on a replaysafe Transport:
// Forwarder is an http.Handler that forwards each inbound request to one
// upstream (New, Options), with replaysafe's rules deciding every resend.
//
// It never collects a request body to enable a retry, so a forwarded body
// is resent only on evidence that the upstream did not process it, and a
// request without a body also when the failure was ambiguous but the
// method is idempotent. Each request is planned before it goes out (Plan,
// a pure function: target form, egress version, mode: ordinary, HTTP/1.1
// Upgrade or extended CONNECT), its hop-by-hop fields are removed (RFC
// 9110 §7.6.1) and Via, Forwarded and X-Forwarded-For added as
// configured. A failure the rules do not resend reaches the client as 502
// Bad Gateway with a Replaysafe-Rule header (RuleHeader) naming the rule;
// a phase deadline as 504 Gateway Timeout. docs/forwarding.md has the
// translation matrix and the fault comparison beside
// httputil.ReverseProxy.
package forward
