package replaysafe_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/adapters/informational"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// allocated returns the bytes f allocated in the process (the server's
// included: an upper bound on the client's).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestEndlessInformationalFails: a server that sends 100 or 103 forever
// fails the call through the Transport on every protocol, well within
// a second and 16 MiB, with the bound named in the error, never resent.
// The server saw the request once.
func TestEndlessInformationalFails(t *testing.T) {
	for _, status := range []int{100, 103} {
		t.Run(fmt.Sprint("h1/", status), func(t *testing.T) {
			s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
				replaysafetest.Script(replaysafetest.EndlessInterim(status, replaysafetest.CloseFIN)),
			}})
			tr, _ := client(t, s, replaysafe.Options{})
			flood(t, t.Context(), tr, s.URL())
			wantCopies(t, s, "/flood", 1)
		})
		t.Run(fmt.Sprint("h2/", status), func(t *testing.T) {
			s := startH2(t, h2Script([]h2server.Action{h2server.Endless1xx(status)}))
			tr, _ := h2Client(t, s, replaysafe.Options{})
			flood(t, t.Context(), tr, s.URL())
			wantH2Copies(t, s, "/flood", 0)
		})
		t.Run(fmt.Sprint("h3/", status), func(t *testing.T) {
			// quic-go stops after 5 1xx responses itself; the bound is
			// the adapter's count of them.
			s := startH3(t, h3Script([]h3server.Action{h3server.Endless1xx(status)}))
			tr, _ := h3Client(t, s, replaysafe.Options{})
			flood(t, t.Context(), tr, s.URL())
			wantH3Copies(t, s, "/flood", 0)
		})
	}
}

// flood calls GET /flood on base through tr and checks the failure: RS07
// after one attempt, the informational bound in the error, within 16 MiB.
// The request carries ctx.
func flood(t *testing.T, ctx context.Context, tr *replaysafe.Transport, base string) {
	t.Helper()
	var err error
	var took time.Duration
	n := allocated(func() {
		began := time.Now()
		_, _, err = roundTrip(tr, newRequest(t, ctx, "GET", base+"/flood", ""))
		took = time.Since(began)
	})
	checkFlood(t, err, took, n, 16<<20)
}

func checkFlood(t *testing.T, err error, took time.Duration, alloc, maxAlloc uint64) {
	t.Helper()
	var e *replaysafe.Error
	if !errors.As(err, &e) || e.Attempts != 1 || e.Rule != fsm.RuleResponseStarted {
		t.Fatalf("err %v, want RS07 after 1 attempt", err)
	}
	var le *informational.LimitError
	if !errors.Is(err, informational.ErrLimit) || !errors.As(err, &le) || le.Count < 2 {
		t.Errorf("error %v does not name the informational bound", err)
	}
	if alloc > maxAlloc { // the bound, not the server's supply, ended it
		t.Errorf("allocated %d bytes, bound %d", alloc, maxAlloc)
	}
	t.Logf("%v, %v, %.2f MiB", err, took, float64(alloc)/(1<<20))
}

// TestEndlessInformationalFailsWithCallerHook: the same floods fail the
// same way when the request's context carries the caller's own
// Got1xxResponse hook, one that accepts every 1xx (as the Forwarder's
// relay does). httptrace composes two hooks by returning the caller's
// verdict alone, and net/http and x/net count no 1xx bytes once any
// hook is installed, so without care the bound would be gone. The
// caller's hook saw at most the 32 responses the bound allows, and the
// server saw the request once.
func TestEndlessInformationalFailsWithCallerHook(t *testing.T) {
	hooked := func(t *testing.T, tr *replaysafe.Transport, base string) {
		t.Helper()
		var seen atomic.Int64
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			Got1xxResponse: func(int, textproto.MIMEHeader) error { seen.Add(1); return nil },
		})
		defer func() {
			if got := seen.Load(); got > informational.DefaultCount {
				t.Errorf("the caller's hook saw %d informational responses, bound %d", got, informational.DefaultCount)
			}
		}()
		flood(t, ctx, tr, base)
	}
	t.Run("h1", func(t *testing.T) {
		s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{
			replaysafetest.Script(replaysafetest.EndlessInterim(103, replaysafetest.CloseFIN)),
		}})
		tr, _ := client(t, s, replaysafe.Options{})
		hooked(t, tr, s.URL())
		wantCopies(t, s, "/flood", 1)
	})
	t.Run("h2", func(t *testing.T) {
		s := startH2(t, h2Script([]h2server.Action{h2server.Endless1xx(103)}))
		tr, _ := h2Client(t, s, replaysafe.Options{})
		hooked(t, tr, s.URL())
		wantH2Copies(t, s, "/flood", 0)
	})
	t.Run("h3", func(t *testing.T) {
		s := startH3(t, h3Script([]h3server.Action{h3server.Endless1xx(103)}))
		tr, _ := h3Client(t, s, replaysafe.Options{})
		hooked(t, tr, s.URL())
		wantH3Copies(t, s, "/flood", 0)
	})
}

// TestCallerInformationalHookKeepsItsVerdict: below the bound, the
// caller's own Got1xxResponse hook sees each 1xx and its verdict stands,
// beside replaysafe's hook: accepting a 103 lets the 200 through,
// refusing it fails the call with the caller's error (wrapped over
// HTTP/1.1; named in x/net's StreamError over HTTP/2), not resent (the
// server read the request). The server saw one copy either way.
func TestCallerInformationalHookKeepsItsVerdict(t *testing.T) {
	refused := errors.New("caller refuses the 103")
	for _, h2 := range []bool{false, true} {
		for _, refuse := range []bool{false, true} {
			t.Run(fmt.Sprintf("h2=%v/refuse=%v", h2, refuse), func(t *testing.T) {
				var got atomic.Int64
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					got.Add(1)
					w.Header().Set("Link", "</a.css>; rel=preload")
					w.WriteHeader(http.StatusEarlyHints)
					w.Header().Del("Link")
					io.WriteString(w, "ok")
				}))
				o := replaysafe.Options{Protocol: replaysafe.ProtocolHTTP1}
				if h2 {
					srv.EnableHTTP2 = true
					srv.StartTLS()
					o = replaysafe.Options{Protocol: replaysafe.ProtocolHTTP2,
						TLSClientConfig: &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}}
				} else {
					srv.Start()
				}
				t.Cleanup(srv.Close)
				tr := replaysafe.New(o)
				t.Cleanup(tr.CloseIdleConnections)
				var hints []string
				var firstByte atomic.Int64
				ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
					Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
						hints = append(hints, fmt.Sprint(code, " ", h.Get("Link")))
						if refuse {
							return refused
						}
						return nil
					},
					GotFirstResponseByte: func() { firstByte.Add(1) },
				})
				code, body, err := roundTrip(tr, newRequest(t, ctx, "GET", srv.URL+"/hint", ""))
				if len(hints) != 1 || hints[0] != "103 </a.css>; rel=preload" || firstByte.Load() != 1 {
					t.Errorf("caller's hooks saw 1xx %q and %d first bytes", hints, firstByte.Load())
				}
				var e *replaysafe.Error
				switch {
				case refuse && (!errors.As(err, &e) || e.Attempts != 1 || !strings.Contains(err.Error(), refused.Error())):
					t.Errorf("refused 103: err %v, want the caller's error after 1 attempt", err)
				case refuse && !h2 && !errors.Is(err, refused):
					// x/net's StreamError names the hook's error but does
					// not unwrap to it.
					t.Errorf("refused 103: err %v does not wrap the caller's error", err)
				case !refuse && (err != nil || code != 200 || body != "ok"):
					t.Errorf("accepted 103: %d %q %v", code, body, err)
				}
				if n := got.Load(); n != 1 {
					t.Errorf("server saw %d copies", n)
				}
			})
		}
	}
}

// TestPeerTextInErrorIsCut: text a server controls reaches the caller's
// error message at most 1 KiB long, with the count of bytes cut. A 503
// whose reason phrase is 100 KiB, retried under Options.Retry until the
// caller's deadline ends the wait, names the status in under 2 KiB; an
// *Error whose cause says 1 MiB (an x/net GOAWAY's debug data can) says
// 1 KiB of it, and still unwraps to the whole cause.
func TestPeerTextInErrorIsCut(t *testing.T) {
	t.Run("reason phrase", func(t *testing.T) {
		reason := strings.Repeat("x", 100<<10)
		s := start(t, replaysafetest.Config{Conns: []replaysafetest.ConnScript{replaysafetest.Script(
			replaysafetest.RawThenClose("HTTP/1.1 503 "+reason+"\r\nRetry-After: 5\r\nContent-Length: 0\r\n\r\n", replaysafetest.CloseFIN))}})
		tr, _ := client(t, s, replaysafe.Options{Retry: replaysafe.Retry{MaxAttempts: 3}})
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		_, _, err := roundTrip(tr, newRequest(t, ctx, "GET", s.URL()+"/r", ""))
		if err == nil || !strings.Contains(err.Error(), "503 xxx") || !strings.Contains(err.Error(), "bytes cut") || len(err.Error()) > 2<<10 {
			t.Fatalf("error of %d bytes: %.300s", len(err.Error()), err)
		}
		t.Logf("error of %d bytes: %s", len(err.Error()), err)
		wantCopies(t, s, "/r", 1)
	})
	t.Run("cause", func(t *testing.T) {
		cause := errors.New("debug=" + strings.Repeat("d", 1<<20))
		e := &replaysafe.Error{Rule: fsm.RuleAmbiguousNotIdempotent, Attempts: 1, Err: cause}
		msg := e.Error()
		if len(msg) > 2<<10 || !strings.Contains(msg, "(1,047,558 bytes cut)") || !strings.HasSuffix(msg, "(RS18 ambiguous-not-idempotent, 1 attempt)") {
			t.Errorf("message of %d bytes: %.200s … %s", len(msg), msg, msg[max(0, len(msg)-100):])
		}
		if !errors.Is(e, cause) {
			t.Error("the cut message's error does not unwrap to the whole cause")
		}
	})
}
