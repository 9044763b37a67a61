package h2server

import (
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

var _ replaysafetest.Scripted = (*Server)(nil)

// Receipts lists every stream received, in the order its HEADERS
// arrived (replaysafetest.Scripted): a refused stream, or one above a
// GOAWAY, is Unprocessed.
func (s *Server) Receipts() []replaysafetest.Receipt {
	return kit.Map(s.Requests(), func(r Received) replaysafetest.Receipt {
		return r.Receipt(r.EndStream)
	})
}
