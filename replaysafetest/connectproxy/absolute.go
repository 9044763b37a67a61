package connectproxy

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/url"
	"time"
)

// maxForwardBody bounds a forwarded request or response body.
const maxForwardBody = 1 << 20

// forwardAbsolute serves a connection whose first request, req, recorded
// as i, came in absolute form (Config.Forward): it forwards each request on the
// connection to its origin, one at a time, and writes the origin's
// response back, keeping the connection, until the client closes it,
// reading times out, or the script closes it (Script.CloseBeforeForwarding,
// Script.CloseAfterForwarding). Every request is recorded before it is
// acted on. The origin must be a loopback address; with Config.Upstream
// the request goes to that proxy, in absolute form too.
func (s *Server) forwardAbsolute(conn net.Conn, br *bufio.Reader, req *http.Request, i, index int, sc Script) {
	for n := 1; ; n++ {
		if n > 1 {
			i = s.record(Request{
				Conn: index, Method: req.Method, Target: req.RequestURI, Proto: req.Proto,
				Host: req.Host, Header: req.Header.Clone(),
			})
		}
		if n == sc.CloseBeforeForwarding {
			s.log("conn %d: closing as request %d arrived, unforwarded", index, n)
			return
		}
		status, ok := s.forwardOne(conn, req, i, n != sc.CloseAfterForwarding)
		if !ok {
			return
		}
		if n == sc.CloseAfterForwarding {
			s.log("conn %d: request %d forwarded (%d), closing unanswered", index, n, status)
			return
		}
		conn.SetReadDeadline(time.Now().Add(s.readTimeout))
		next, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		conn.SetReadDeadline(time.Time{})
		req = next
	}
}

// forwardOne sends req, read from the client in absolute form, to its
// origin in origin form without the proxy's own fields, and, when answer
// is set, writes the origin's response to the client. It reports the
// status and whether the client connection may go on.
func (s *Server) forwardOne(conn net.Conn, req *http.Request, i int, answer bool) (int, bool) {
	if s.cfg.RequireAuth != nil && req.Header.Get("Proxy-Authorization") != s.cfg.RequireAuth.basic() {
		return http.StatusProxyAuthRequired, s.respond(conn, i, Script{Header: http.Header{"Content-Length": {"0"}}}, http.StatusProxyAuthRequired, true)
	}
	u, err := url.Parse(req.RequestURI)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		s.respond(conn, i, Script{}, http.StatusBadRequest, false)
		return http.StatusBadRequest, false
	}
	out := req.Clone(s.ctx)
	out.RequestURI = ""
	out.URL = u
	out.Header.Del("Proxy-Authorization")
	out.Header.Del("Proxy-Connection")
	out.Body = http.MaxBytesReader(nil, req.Body, maxForwardBody)
	origin := &http.Transport{
		DialContext:       func(_ context.Context, _, addr string) (net.Conn, error) { return s.dial(addr) },
		DisableKeepAlives: true,
	}
	if up := s.cfg.Upstream; up != nil {
		// Through the upstream proxy, in absolute form too.
		pu := &url.URL{Scheme: "http", Host: up.Addr}
		if up.Auth != nil {
			pu.User = url.UserPassword(up.Auth.Username, up.Auth.Password)
		}
		origin.Proxy = http.ProxyURL(pu)
	}
	defer origin.CloseIdleConnections()
	resp, err := origin.RoundTrip(out)
	if err != nil {
		s.log("origin %s: %v", u.Host, err)
		return http.StatusBadGateway, s.respond(conn, i, Script{}, http.StatusBadGateway, false)
	}
	defer resp.Body.Close()
	s.answered(i, resp.StatusCode)
	if !answer {
		return resp.StatusCode, true
	}
	resp.Body = http.MaxBytesReader(nil, resp.Body, maxForwardBody)
	// The origin's connection is not the client's: its Connection field
	// and close say nothing about this one, which stays open.
	resp.Close = false
	resp.Header.Del("Connection")
	conn.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	return resp.StatusCode, resp.Write(conn) == nil
}
