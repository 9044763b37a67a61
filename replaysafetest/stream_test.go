package replaysafetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kittest"
)

// streamServer is the life cycle h2server and h3server share, seen
// through one shape so that one test covers both.
type streamServer struct {
	close        func() error
	waitConns    func(context.Context, int) error
	waitRequests func(context.Context, int) error
}

// streamServers starts either server with a lifetime (zero: the
// default); errClosed is its ErrClosed.
var streamServers = []struct {
	name      string
	errClosed error
	start     func(lifetime time.Duration) (streamServer, error)
}{
	{"h2server", h2server.ErrClosed, func(lifetime time.Duration) (streamServer, error) {
		s, err := h2server.New(h2server.Config{Lifetime: lifetime})
		if err != nil {
			return streamServer{}, err
		}
		return streamServer{s.Close, s.WaitConns, s.WaitRequests}, nil
	}},
	{"h3server", h3server.ErrClosed, func(lifetime time.Duration) (streamServer, error) {
		s, err := h3server.New(h3server.Config{Lifetime: lifetime})
		if err != nil {
			return streamServer{}, err
		}
		wait := func(ctx context.Context, n int) error { _, err := s.WaitRequests(ctx, n); return err }
		return streamServer{s.Close, s.WaitConns, wait}, nil
	}},
}

// TestStreamServerLifetime: a server closes itself once its Lifetime is
// over, and a Wait then fails with its ErrClosed.
func TestStreamServerLifetime(t *testing.T) {
	for _, tc := range streamServers {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.start(100 * time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			if err := s.waitConns(kittest.Context(t), 1); !errors.Is(err, tc.errClosed) {
				t.Fatalf("wait: %v, want ErrClosed once the lifetime is over", err)
			}
		})
	}
}

// TestStreamServerWaitHonoursTheContext: a Wait ends with its context.
func TestStreamServerWaitHonoursTheContext(t *testing.T) {
	for _, tc := range streamServers {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.start(0)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := s.waitRequests(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// TestStreamEnumStrings: the names of the kinds and moments h2server and
// h3server share.
func TestStreamEnumStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{replaysafetest.StreamRefuse.String(), "refuse"},
		{replaysafetest.StreamPartialHeaders.String(), "partial-headers"},
		{replaysafetest.StreamStopSending.String(), "stop-sending"},
		{replaysafetest.StreamKind(200).String(), "StreamKind(200)"},
		{h2server.OnHeaders.String(), "on-headers"},
		{h3server.Moment(9).String(), "Moment(9)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
