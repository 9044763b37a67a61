package connectproxy

import "github.com/replaysafe/replaysafe/replaysafetest"

var _ replaysafetest.Scripted = (*Server)(nil)

// Accepted returns the number of connections accepted so far (Conns).
func (b *base) Accepted() int { return b.Conns() }

// Receipts lists the CONNECT requests read, in order; Path is the
// tunnel's target (replaysafetest.Scripted).
func (s *Server) Receipts() []replaysafetest.Receipt {
	rs := s.Requests()
	out := make([]replaysafetest.Receipt, len(rs))
	for i, r := range rs {
		out[i] = replaysafetest.Receipt{Conn: r.Conn, Method: r.Method, Path: r.Target, Complete: true}
	}
	return out
}
