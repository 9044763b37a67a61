package h3server

import (
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

var _ replaysafetest.Scripted = (*Server)(nil)

// Accepted returns the number of connections accepted so far.
func (s *Server) Accepted() int { return kit.Locked(&s.mu, func() int { return len(s.conns) }) }

// Receipts lists every request stream received, in the order its HEADERS
// arrived (replaysafetest.Scripted): a rejected stream, or one at or
// above a GOAWAY, is Unprocessed.
func (s *Server) Receipts() []replaysafetest.Receipt {
	return kit.Map(s.Requests(), func(r Received) replaysafetest.Receipt {
		return replaysafetest.Receipt{Conn: r.Conn, Method: r.Method, Path: r.Path, Body: r.Body,
			Complete: r.FIN, Unprocessed: r.Ignored || r.Action == KindReject}
	})
}
