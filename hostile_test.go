package replaysafe_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe"
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
			flood(t, tr, s.URL())
			wantCopies(t, s, "/flood", 1)
		})
		t.Run(fmt.Sprint("h2/", status), func(t *testing.T) {
			s := startH2(t, h2Script([]h2server.Action{h2server.Endless1xx(status)}))
			tr, _ := h2Client(t, s, replaysafe.Options{})
			flood(t, tr, s.URL())
			wantH2Copies(t, s, "/flood", 0)
		})
		t.Run(fmt.Sprint("h3/", status), func(t *testing.T) {
			// quic-go stops after 5 1xx responses itself; the bound is
			// the adapter's count of them.
			s := startH3(t, h3Script([]h3server.Action{h3server.Endless1xx(status)}))
			tr, _ := h3Client(t, s, replaysafe.Options{})
			flood(t, tr, s.URL())
			wantH3Copies(t, s, "/flood", 0)
		})
	}
}

// flood calls GET /flood on base through tr and checks the failure: RS07
// after one attempt, the informational bound in the error, within 1 s and
// 16 MiB.
func flood(t *testing.T, tr *replaysafe.Transport, base string) {
	t.Helper()
	var err error
	var took time.Duration
	n := allocated(func() {
		began := time.Now()
		_, _, err = roundTrip(tr, newRequest(t, t.Context(), "GET", base+"/flood", ""))
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
	var le *replaysafe.InformationalLimitError
	if !errors.Is(err, replaysafe.ErrInformationalLimit) || !errors.As(err, &le) || le.Count < 2 {
		t.Errorf("error %v does not name the informational bound", err)
	}
	if took > time.Second || alloc > maxAlloc {
		t.Errorf("took %v and %d bytes, bound 1s and %d", took, alloc, maxAlloc)
	}
	t.Logf("%v, %v, %.2f MiB", err, took, float64(alloc)/(1<<20))
}
