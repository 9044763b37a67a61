package connectproxy

import (
	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/internal/kit"
)

var _ replaysafetest.Scripted = (*Server)(nil)

// Accepted returns the number of connections accepted so far (Conns).
func (b *base) Accepted() int { return b.Conns() }

// Receipts lists the CONNECT requests read, in order; Path is the
// tunnel's target (replaysafetest.Scripted).
func (s *Server) Receipts() []replaysafetest.Receipt {
	return kit.Map(s.Requests(), func(r Request) replaysafetest.Receipt {
		return replaysafetest.Receipt{Conn: r.Conn, Method: r.Method, Path: r.Target, Complete: true}
	})
}
