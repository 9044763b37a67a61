package h3server

import (
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

var _ replaysafetest.Scripted = (*Server)(nil)

// Accepted returns the number of connections accepted so far.
func (s *Server) Accepted() int { return s.core.Accepted() }

// Receipts lists every request stream received, in the order its HEADERS
// arrived (replaysafetest.Scripted): a rejected stream, or one at or
// above a GOAWAY, is Unprocessed.
func (s *Server) Receipts() []replaysafetest.Receipt {
	return kit.Map(s.Requests(), func(r Received) replaysafetest.Receipt {
		return r.Receipt(r.FIN)
	})
}
