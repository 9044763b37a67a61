package replaysafetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kittest"
)

// ---- enums and config -------------------------------------------------

func TestEnumStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{KindRespond.String(), "respond"},
		{KindRespondThenCloseOnNext.String(), "respond-then-close-on-next"},
		{KindHang.String(), "hang"},
		{Kind(42).String(), "Kind(42)"},
		{Kind(kindCount).String(), fmt.Sprintf("Kind(%d)", kindCount)},
		{CloseFIN.String(), "fin"},
		{CloseFINNoNotify.String(), "fin-no-notify"},
		{CloseRST.String(), "rst"},
		{CloseMode(42).String(), "CloseMode(42)"},
		{OK().String(), "respond(200)"},
		{Drop(CloseRST).String(), "drop(rst)"},
		{IdleClose(time.Second, CloseFIN).String(), "idle-close(1s,fin)"},
		{Hang(0).WithDelay(2 * time.Second).WithClose(CloseRST).String(), "hang(2s,rst)"},
		{RespondClose(CloseRST).WithStatus(503).String(), "respond-close(503,rst)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	base := OK().WithHeader("A", "1")
	if derived := base.WithHeader("B", "2"); base.Header.Get("B") != "" || derived.Header.Get("A") != "1" {
		t.Error("WithHeader modified its receiver or lost fields")
	}
	for k := Kind(0); int(k) < kindCount; k++ {
		if strings.HasPrefix(k.String(), "Kind(") || handlers[k] == nil {
			t.Errorf("kind %d has no name or no handler", k)
		}
	}
}

func TestInvalidConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"kind":         {Conns: []ConnScript{Script(Action{Kind: 99})}},
		"close mode":   {Conns: []ConnScript{Script(Drop(7))}},
		"status":       {Conns: []ConnScript{Script(Respond(42, ""))}},
		"delay":        {Conns: []ConnScript{Script(IdleClose(-1, CloseFIN))}},
		"default":      {Default: &ConnScript{Default: &Action{Kind: 200}}},
		"idle mode":    {Conns: []ConnScript{{IdleClose: 9}}},
		"read timeout": {ReadTimeout: -1},
	} {
		if s, err := Start(cfg); err == nil {
			s.Close()
			t.Errorf("%s: Start accepted an invalid config", name)
		}
	}
}

// ---- parsing and recording --------------------------------------------

func TestRespondKeepAlive(t *testing.T) {
	forTransports(t, func(t *testing.T, tr transport) {
		s, cl := startDial(t, Config{TLS: tr.tls})
		cl.send(getA)
		cl.expect(respOK)
		cl.send(postB)
		cl.expect(respOK)
		checkRecorded(t, s, rec(0, 0, getA), rec(0, 1, postB))
		r := s.Requests()
		if r[0].Method != "GET" || r[0].Target != "/a" || r[0].Proto != "HTTP/1.1" ||
			r[0].Header.Get("Host") != "example.test" || r[0].Header.Get("User-Agent") != "t" || len(r[0].Body) != 0 {
			t.Errorf("request 0 parsed as %+v", r[0])
		}
		if r[1].Method != "POST" || string(r[1].Body) != "hello" || r[1].Header.Get("Content-Type") != "text/plain" {
			t.Errorf("request 1 parsed as %+v", r[1])
		}
		if s.Conns() != 1 || s.ConnClosed(0) {
			t.Errorf("Conns %d, closed %v", s.Conns(), s.ConnClosed(0))
		}
	})
}

func TestResponses(t *testing.T) {
	for _, c := range []struct {
		name string
		act  Action
		req  string
		want string
	}{
		{"custom", Respond(201, "made").WithHeader("X-B", "2").WithHeader("X-A", "1"), getA,
			"HTTP/1.1 201 Created\r\nContent-Length: 4\r\nX-A: 1\r\nX-B: 2\r\n\r\nmade"},
		{"head", OK(), "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"},
		{"no content", Respond(204, ""), getA, "HTTP/1.1 204 No Content\r\n\r\n"},
		{"explicit length", OK().WithHeader("Content-Length", "7"), getA, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nok"},
		{"with status and body", OK().WithStatus(404).WithBody("nope"), getA,
			"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope"},
		{"zero action", Action{}, getA, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{"http/1.0 keep-alive", OK(), "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, cl := startDial(t, Config{Conns: []ConnScript{Script(c.act)}})
			cl.send(c.req)
			cl.expect(c.want)
			cl.send(getB) // still open
			cl.expect(respOK)
			checkRecorded(t, s, rec(0, 0, c.req), rec(0, 1, getB))
		})
	}
}

// answerThenClose starts a server with cfg, sends raw on one connection
// and expects want back, then the server's FIN.
func answerThenClose(t *testing.T, cfg Config, raw, want string) *Server {
	t.Helper()
	s, cl := startDial(t, cfg)
	cl.send(raw)
	cl.expect(want)
	cl.expectClose(CloseFIN)
	return s
}

func TestClientAsksToClose(t *testing.T) {
	for _, c := range []struct{ name, req string }{
		{"connection close", "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"},
		{"http/1.0", "GET / HTTP/1.0\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := answerThenClose(t, Config{}, c.req, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
			checkRecorded(t, s, rec(0, 0, c.req))
		})
	}
}

func TestRequestFraming(t *testing.T) {
	for _, c := range []struct {
		name, raw, body string
		trailer         http.Header
	}{
		{"content-length", postB, "hello", nil},
		{"zero length", "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "", nil},
		{"repeated length", "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2, 2\r\n\r\nhi", "hi", nil},
		{"chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;ext=x\r\n!\r\n0\r\n\r\n", "hello!", nil},
		{"chunked trailers", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\nA \r\n0123456789\r\n0\r\nX-Sum: 45\r\nX-More: a\r\n\r\n",
			"0123456789", http.Header{"X-Sum": {"45"}, "X-More": {"a"}}},
		{"gzip then chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n2\r\nzz\r\n0\r\n\r\n", "zz", nil},
		{"bare LF", "POST / HTTP/1.1\nContent-Length: 2\n\nhi", "hi", nil},
		{"leading blank lines", "\r\n\r\nGET / HTTP/1.1\r\n\r\n", "", nil},
		{"absolute form", "GET http://x.test/p?q=1 HTTP/1.1\r\nHost: x.test\r\n\r\n", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, cl := startDial(t, Config{})
			// Send byte by byte-ish in small pieces to exercise resumption.
			for i := 0; i < len(c.raw); i += 3 {
				cl.send(c.raw[i:min(i+3, len(c.raw))])
			}
			cl.expect(respOK)
			checkRecorded(t, s, rec(0, 0, c.raw))
			r := s.Requests()[0]
			if string(r.Body) != c.body {
				t.Errorf("body %q, want %q", r.Body, c.body)
			}
			if fmt.Sprint(r.Trailer) != fmt.Sprint(c.trailer) {
				t.Errorf("trailer %v, want %v", r.Trailer, c.trailer)
			}
		})
	}
}

func TestPipelined(t *testing.T) {
	forTransports(t, func(t *testing.T, tr transport) {
		s, cl := startDial(t, Config{TLS: tr.tls, Conns: []ConnScript{Script(Respond(200, "one"), Respond(200, "two"))}})
		cl.send(getA + postB + getB)
		cl.expect("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none" +
			"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo" + respOK)
		checkRecorded(t, s, rec(0, 0, getA), rec(0, 1, postB), rec(0, 2, getB))
	})
}

func TestBadRequests(t *testing.T) {
	const bad = "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
	for _, c := range []struct{ name, raw string }{
		{"no version", "GET /\r\n\r\n"},
		{"http/2", "GET / HTTP/2.0\r\n\r\n"},
		{"double space", "GET  / HTTP/1.1\r\n\r\n"},
		{"bad method", "G(T / HTTP/1.1\r\n\r\n"},
		{"space before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n"},
		{"obs-fold", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"},
		{"bare CR", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n"},
		{"te and cl", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n"},
		{"te not chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"},
		{"conflicting cl", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"},
		{"signed cl", "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\na"},
		{"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
		{"chunk without crlf", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := answerThenClose(t, Config{}, c.raw, bad)
			if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
				t.Fatal(err)
			}
			p := s.Partial()
			if s.Count() != 0 || len(p) != 1 || !p[0].Partial || string(p[0].Raw) != c.raw ||
				!strings.Contains(p[0].Err, "bad request") || p[0].Conn != 0 || p[0].Seq != 0 {
				t.Errorf("recorded %v, partial %+v", s.Requests(), p)
			}
		})
	}
}

func TestTooLarge(t *testing.T) {
	for _, c := range []struct{ name, raw string }{
		{"declared body", "POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n"},
		{"long header", "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 300)},
		{"big chunk", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfff\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, cl := startDial(t, Config{MaxRequestBytes: 200})
			cl.send(c.raw)
			cl.expect("HTTP/1.1 400 Bad Request\r\n")
			if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
				t.Fatal(err)
			}
			p := s.Partial()
			if s.Count() != 0 || len(p) != 1 || !strings.Contains(p[0].Err, "MaxRequestBytes") {
				t.Errorf("partial %+v", p)
			}
		})
	}
}

func TestPartialRequests(t *testing.T) {
	t.Run("client closes mid-headers", func(t *testing.T) {
		forTransports(t, func(t *testing.T, tr transport) {
			s, cl := startDial(t, Config{TLS: tr.tls})
			cl.send(getA)
			cl.expect(respOK)
			half := postB[:30]
			cl.send(half)
			cl.c.Close()
			if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
				t.Fatal(err)
			}
			checkPartial(t, s, 1, half, "eof")
		})
	})
	t.Run("client closes mid-body", func(t *testing.T) {
		s, cl := startDial(t, Config{})
		half := postB[:len(postB)-2]
		cl.send(half)
		cl.tcp.CloseWrite()
		cl.expectClose(CloseFIN)
		checkPartial(t, s, 0, half, "eof")
	})
	t.Run("client resets", func(t *testing.T) {
		s, cl := startDial(t, Config{})
		cl.send(postB[:10])
		if err := s.Wait(ctxT(t), func() bool { return s.Conns() == 1 }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // let the bytes reach the server
		cl.tcp.SetLinger(0)
		cl.c.Close()
		if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
			t.Fatal(err)
		}
		checkPartial(t, s, 0, postB[:10], "connection reset")
	})
	t.Run("read timeout", func(t *testing.T) {
		forTransports(t, func(t *testing.T, tr transport) {
			s, cl := startDial(t, Config{TLS: tr.tls, ReadTimeout: 100 * time.Millisecond, IdleTimeout: 5 * time.Second})
			cl.send(postB[:20])
			cl.expectClose(CloseFIN) // the server gives up and closes
			checkPartial(t, s, 0, postB[:20], "timeout")
		})
	})
	t.Run("server closes", func(t *testing.T) {
		s, cl := startDial(t, Config{})
		cl.send(postB[:20])
		time.Sleep(20 * time.Millisecond)
		s.Close()
		checkPartial(t, s, 0, postB[:20], "server closed")
	})
}

func checkPartial(t *testing.T, s *Server, seq int, raw, why string) {
	t.Helper()
	p := s.Partial()
	if len(p) != 1 || !p[0].Partial || string(p[0].Raw) != raw || p[0].Err != why || p[0].Seq != seq || p[0].Conn != 0 {
		t.Errorf("partial = %+v; want one with raw %q, err %q, seq %d", p, raw, why, seq)
	}
	for _, r := range s.Requests() {
		if r.Partial {
			t.Errorf("partial request among complete ones: %+v", r)
		}
	}
}

// ---- actions ------------------------------------------------------------

// TestCloseCrossingRequest is the deterministic "close crossing the
// request": request 2 is read in full and recorded, and never answered.
func TestCloseCrossingRequest(t *testing.T) {
	forEachTransportAndMode(t, func(t *testing.T, tlsOn bool, mode CloseMode) {
		s, cl := startDial(t, Config{TLS: tlsOn, Conns: []ConnScript{Script(RespondThenCloseOnNext(mode))}})
		cl.send(getA)
		cl.expect(respOK)
		// Send the second request in two parts: the server must wait for
		// all of it before closing.
		head, body := postB[:len(postB)-5], postB[len(postB)-5:]
		cl.send(head)
		time.Sleep(30 * time.Millisecond)
		if s.ConnClosed(0) || s.Count() != 1 {
			t.Fatalf("server acted before the request was complete (closed %v, count %d)", s.ConnClosed(0), s.Count())
		}
		cl.send(body)
		cl.expectClose(mode)
		checkRecorded(t, s, rec(0, 0, getA), rec(0, 1, postB))
		if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
			t.Error(err)
		}
	})
}

func TestCloseCrossingIdle(t *testing.T) {
	// With no next request the connection closes at the idle timeout, in
	// the script's idle mode.
	s := start(t, Config{Conns: []ConnScript{{
		Actions:     []Action{RespondThenCloseOnNext(CloseFIN)},
		IdleTimeout: 50 * time.Millisecond,
		IdleClose:   CloseRST,
	}}})
	cl := dial(t, s)
	cl.send(getA)
	cl.expect(respOK)
	cl.expectClose(CloseRST)
	checkRecorded(t, s, rec(0, 0, getA))
}

func TestDrop(t *testing.T) {
	chunked := "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
	forEachTransportAndMode(t, func(t *testing.T, tlsOn bool, mode CloseMode) {
		s, cl := startDial(t, Config{TLS: tlsOn, Conns: []ConnScript{Script(OK(), Drop(mode))}})
		cl.send(getA)
		cl.expect(respOK)
		cl.send(chunked)
		cl.expectClose(mode)
		checkRecorded(t, s, rec(0, 0, getA), rec(0, 1, chunked))
		if got := s.Requests()[1]; string(got.Body) != "abc" {
			t.Errorf("body %q", got.Body)
		}
	})
}

func TestIdleClose(t *testing.T) {
	for _, delay := range []time.Duration{0, 60 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			forEachTransportAndMode(t, func(t *testing.T, tlsOn bool, mode CloseMode) {
				s, cl := startDial(t, Config{TLS: tlsOn, Conns: []ConnScript{Script(IdleClose(delay, mode))}})
				begin := time.Now()
				cl.send(getA)
				cl.expect(respOK)
				if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
					t.Fatal(err)
				}
				if el := time.Since(begin); el < delay {
					t.Errorf("closed after %v, before the %v delay", el, delay)
				}
				cl.expectClose(mode)
				checkRecorded(t, s, rec(0, 0, getA))
			})
		})
	}
}

func TestIdleCloseOn(t *testing.T) {
	forEachTransportAndMode(t, func(t *testing.T, tlsOn bool, mode CloseMode) {
		signal := make(chan struct{})
		s, cl := startDial(t, Config{TLS: tlsOn, Conns: []ConnScript{Script(IdleCloseOn(signal, mode))}})
		cl.send(getA)
		cl.expect(respOK)
		if s.ConnClosed(0) {
			t.Fatal("closed before the signal")
		}
		close(signal)
		if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
			t.Fatal(err)
		}
		cl.expectClose(mode)
		checkRecorded(t, s, rec(0, 0, getA))
	})
	if got, want := IdleCloseOn(make(chan struct{}), CloseRST).String(), "idle-close(on-signal,rst)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestIdleCloseOnServerClose(t *testing.T) {
	s, cl := startDial(t, Config{Conns: []ConnScript{Script(IdleCloseOn(make(chan struct{}), CloseFIN))}})
	cl.send(getA)
	cl.expect(respOK)
	s.Close()
	if !s.ConnClosed(0) {
		t.Fatal("connection open after Close")
	}
}

func TestIdleCloseRequestDuringDelay(t *testing.T) {
	s, cl := startDial(t, Config{Conns: []ConnScript{Script(IdleClose(5*time.Second, CloseFIN))}})
	cl.send(getA)
	cl.expect(respOK)
	cl.send(getB)
	cl.expectClose(CloseFIN) // read, recorded, not answered, closed at once
	checkRecorded(t, s, rec(0, 0, getA), rec(0, 1, getB))
}

func TestBrokenResponses(t *testing.T) {
	for _, c := range []struct {
		name string
		act  func(CloseMode) Action
		want string
	}{
		{"partial status", PartialStatus, "HTTP/1.1 2"},
		{"100 continue", Interim100, "HTTP/1.1 100 Continue\r\n\r\n"},
		{"103 early hints", EarlyHints, "HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"},
		{"malformed", Malformed, "garbage\r\n\r\n"},
		{"raw", func(m CloseMode) Action { return RawThenClose("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort", m) },
			"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort"},
		{"respond close", RespondClose, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			forEachTransportAndMode(t, func(t *testing.T, tlsOn bool, mode CloseMode) {
				s, cl := startDial(t, Config{TLS: tlsOn, Conns: []ConnScript{Script(OK(), c.act(mode))}})
				cl.send(getA)
				cl.expect(respOK)
				cl.send(postB)
				got, err := cl.readToEnd()
				if mode == CloseRST {
					// An RST may overtake unread data in theory; on loopback
					// the bytes arrive first.
					if !strings.HasPrefix(c.want, string(got)) {
						t.Errorf("read %q, want a prefix of %q", got, c.want)
					}
				} else if string(got) != c.want {
					t.Errorf("read %q, want %q", got, c.want)
				}
				cl.checkCloseErr(mode, err)
				checkRecorded(t, s, rec(0, 0, getA), rec(0, 1, postB))
			})
		})
	}
}

func TestHang(t *testing.T) {
	forTransports(t, func(t *testing.T, tr transport) {
		// The hang outlasts the test: Close must end it, not wait for it.
		s, cl := startDial(t, Config{TLS: tr.tls, HangTimeout: time.Hour, Conns: []ConnScript{Script(Hang(0))}})
		cl.send(getA)
		cl.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := cl.c.Read(make([]byte, 1)); !kit.IsTimeout(err) {
			t.Fatalf("read %d, %v; want a client timeout", n, err)
		}
		// Requests sent while hanging are still recorded.
		cl.send(getB)
		if err := s.WaitRequests(ctxT(t), 2); err != nil {
			t.Fatal(err)
		}
		if s.ConnClosed(0) {
			t.Fatal("hanging connection closed")
		}
		kittest.Returns(t, "Close with a hanging connection", func() { s.Close() })
		got, err := cl.readToEnd()
		if len(got) != 0 || err == nil {
			t.Errorf("after Close read %q, %v", got, err)
		}
		checkRecorded(t, s, rec(0, 0, getA), rec(0, 1, getB))
	})
	t.Run("bounded", func(t *testing.T) {
		_, cl := startDial(t, Config{Conns: []ConnScript{Script(Hang(60 * time.Millisecond).WithClose(CloseRST))}})
		begin := time.Now()
		cl.send(getA)
		cl.expectClose(CloseRST)
		if el := time.Since(begin); el < 60*time.Millisecond {
			t.Errorf("hang ended after %v", el)
		}
	})
	t.Run("config bound", func(t *testing.T) {
		_, cl := startDial(t, Config{HangTimeout: 50 * time.Millisecond, Conns: []ConnScript{Script(Hang(0))}})
		cl.send(getA)
		cl.expectClose(CloseFIN)
	})
	t.Run("client gives up", func(t *testing.T) {
		s, cl := startDial(t, Config{Conns: []ConnScript{Script(Hang(0))}})
		cl.send(getA)
		if err := s.WaitRequests(ctxT(t), 1); err != nil {
			t.Fatal(err)
		}
		cl.c.Close()
		if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPipelinedBehindClose checks that requests already buffered behind a
// closing action are recorded, not lost.
func TestPipelinedBehindClose(t *testing.T) {
	s, cl := startDial(t, Config{Conns: []ConnScript{Script(Drop(CloseFIN))}})
	tail := "GET /c HTTP/1.1\r\n"
	cl.send(getA + getB + tail)
	if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	got := s.Requests()
	if len(got) < 1 || string(got[0].Raw) != getA {
		t.Fatalf("requests %+v", got)
	}
	// The socket read may or may not have picked up the pipelined bytes
	// before the close; whatever was read is accounted for.
	var seen []byte
	for _, r := range got {
		seen = append(seen, r.Raw...)
	}
	for _, p := range s.Partial() {
		if p.Err != errUnread.Error() {
			t.Errorf("partial %+v", p)
		}
		seen = append(seen, p.Raw...)
	}
	if !strings.HasPrefix(getA+getB+tail, string(seen)) {
		t.Errorf("recorded bytes %q are not a prefix of what was sent", seen)
	}
}

// ---- scripts ------------------------------------------------------------

func TestConnScripts(t *testing.T) {
	one, two, other := Respond(200, "1"), Respond(200, "2"), Respond(200, "d")
	resp := func(b string) string { return "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n" + b }
	t.Run("last repeats", func(t *testing.T) {
		s := start(t, Config{Conns: []ConnScript{Script(one), Script(two)}})
		for i, want := range []string{"1", "2", "2"} {
			cl := dial(t, s)
			cl.send(getA)
			cl.expect(resp(want))
			cl.send(getB)
			cl.expect(respOK) // beyond the actions: OK()
			if err := s.WaitConns(ctxT(t), i+1); err != nil {
				t.Fatal(err)
			}
		}
		checkRecorded(t, s, rec(0, 0, getA), rec(0, 1, getB), rec(1, 0, getA), rec(1, 1, getB), rec(2, 0, getA), rec(2, 1, getB))
		if on := s.RequestsOn(1); len(on) != 2 || on[0].Conn != 1 || on[1].Seq != 1 {
			t.Errorf("RequestsOn(1) = %+v", on)
		}
	})
	t.Run("default script and action", func(t *testing.T) {
		s := start(t, Config{
			Conns:   []ConnScript{Script(one)},
			Default: &ConnScript{Default: &other},
		})
		cl := dial(t, s)
		cl.send(getA)
		cl.expect(resp("1"))
		cl2 := dial(t, s)
		cl2.send(getA)
		cl2.expect(resp("d"))
		cl2.send(getB)
		cl2.expect(resp("d"))
	})
	t.Run("empty config", func(t *testing.T) {
		s := start(t, Config{})
		for range 3 {
			cl := dial(t, s)
			cl.send(getA)
			cl.expect(respOK)
		}
	})
}

func TestIdleTimeout(t *testing.T) {
	forEachTransportAndMode(t, func(t *testing.T, tlsOn bool, mode CloseMode) {
		s, cl := startDial(t, Config{TLS: tlsOn, Conns: []ConnScript{{IdleTimeout: 50 * time.Millisecond, IdleClose: mode}}})
		cl.send(getA)
		cl.expect(respOK)
		if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
			t.Fatal(err)
		}
		cl.expectClose(mode)
		checkRecorded(t, s, rec(0, 0, getA))
	})
	t.Run("config", func(t *testing.T) {
		s, cl := startDial(t, Config{IdleTimeout: 50 * time.Millisecond}) // never sends anything
		cl.expectClose(CloseFIN)
		if s.Count() != 0 || len(s.Partial()) != 0 {
			t.Error("idle connection recorded something")
		}
	})
}

// ---- waiting, copies, shutdown -----------------------------------------

func TestWait(t *testing.T) {
	s := start(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := s.WaitRequests(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitRequests = %v, want a deadline error", err)
	}

	// A wait for a connection not yet accepted ends when it has closed.
	errc := make(chan error, 1)
	wctx := ctxT(t)
	go func() { errc <- s.WaitConnClosed(wctx, 1) }()
	for range 2 {
		cl := dial(t, s)
		cl.send("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
		cl.readToEnd()
	}
	if err := <-errc; err != nil {
		t.Error(err)
	}

	// Without a deadline the wait is bounded by Config.WaitTimeout.
	s2 := start(t, Config{WaitTimeout: 20 * time.Millisecond})
	if err := s2.WaitRequests(context.Background(), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unbounded WaitRequests = %v", err)
	}

	s.Close()
	if err := s.WaitRequests(context.Background(), 3); !errors.Is(err, ErrClosed) {
		t.Errorf("WaitRequests after Close = %v, want ErrClosed", err)
	}
	if err := s.WaitRequests(context.Background(), 2); err != nil {
		t.Errorf("satisfied WaitRequests after Close = %v", err)
	}
}

func TestRequestsAreCopies(t *testing.T) {
	s, cl := startDial(t, Config{})
	cl.send(postB)
	cl.expect(respOK)
	r := s.Requests()
	r[0].Raw[0] = 'X'
	r[0].Body[0] = 'X'
	r[0].Header.Set("Host", "changed")
	r[0].Conn = 9
	again := s.Requests()[0]
	if string(again.Raw) != postB || string(again.Body) != "hello" || again.Header.Get("Host") != "example.test" || again.Conn != 0 {
		t.Errorf("server state changed through a copy: %+v", again)
	}
}

func TestScriptsAreCopied(t *testing.T) {
	acts := []Action{Respond(200, "ok")}
	s := start(t, Config{Conns: []ConnScript{{Actions: acts}}})
	acts[0] = Drop(CloseRST)
	cl := dial(t, s)
	cl.send(getA)
	cl.expect(respOK)
}

func TestCloseWithEverything(t *testing.T) {
	forTransports(t, func(t *testing.T, tr transport) {
		s := start(t, Config{TLS: tr.tls, HangTimeout: time.Hour, Conns: []ConnScript{
			Script(Hang(0)),
			Script(OK()),
			Script(IdleClose(time.Minute, CloseFIN)),
			Script(RespondThenCloseOnNext(CloseRST)),
		}})
		hung := dial(t, s)
		hung.send(getA)
		idle := dial(t, s)
		idle.send(getA)
		idle.expect(respOK)
		delayed := dial(t, s)
		delayed.send(getA)
		delayed.expect(respOK)
		mid := dial(t, s)
		mid.send(getA)
		mid.expect(respOK)
		mid.send(postB[:10])
		fresh := dial(t, s) // accepted; nothing sent (TLS: handshake done)
		_ = fresh
		raw, err := net.Dial("tcp", s.Addr()) // no handshake at all
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if err := s.WaitRequests(ctxT(t), 4); err != nil {
			t.Fatal(err)
		}
		if err := s.WaitConns(ctxT(t), 6); err != nil {
			t.Fatal(err)
		}
		var closeErr error
		kittest.Returns(t, "Close", func() { closeErr = s.Close() })
		if closeErr != nil {
			t.Fatal(closeErr)
		}
		if g := waitServerGoroutines(time.Second); len(g) > 0 {
			t.Fatalf("goroutines left after Close:\n%s", strings.Join(g, "\n\n"))
		}
		for i := range 6 {
			if !s.ConnClosed(i) {
				t.Errorf("conn %d not marked closed", i)
			}
		}
		if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
			t.Error("listener still accepting after Close")
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// ---- with net/http --------------------------------------------------------

// ---- parser unit tests ----------------------------------------------------

func TestParserResumes(t *testing.T) {
	raw := "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nwiki\r\n5\r\npedia\r\n0\r\nT: v\r\n\r\nGET / HTTP/1.1\r\n\r\n"
	first := strings.Index(raw, "GET")
	for cut := 0; cut <= len(raw); cut++ {
		p := newParser(1 << 10)
		var done bool
		var err error
		if cut > 0 {
			done, err = p.step([]byte(raw[:cut]))
		}
		if err == nil && !done {
			done, err = p.step([]byte(raw))
		}
		if err != nil || !done || p.pos != first || string(p.rec.Body) != "wikipedia" || p.rec.Trailer.Get("T") != "v" {
			t.Fatalf("cut %d: done %v err %v pos %d body %q", cut, done, err, p.pos, p.rec.Body)
		}
	}
}

func TestEndlessInterim(t *testing.T) {
	for _, status := range []int{100, 103} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			s, cl := startDial(t, Config{Conns: []ConnScript{Script(EndlessInterim(status, CloseFIN))}})
			cl.send(getA)
			one := string(EndlessInterim(status, CloseFIN).Raw)
			const copies = 10000
			cl.expect(strings.Repeat(one, copies))
			cl.c.Close() // the client goes away: the flood ends
			if err := s.WaitConnClosed(ctxT(t), 0); err != nil {
				t.Fatal(err)
			}
			checkRecorded(t, s, rec(0, 0, getA))
		})
	}
}
