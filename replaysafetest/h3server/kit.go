package h3server

import "github.com/replaysafe/replaysafe/replaysafetest"

var _ replaysafetest.Scripted = (*Server)(nil)

// Accepted returns the number of connections accepted so far.
func (s *Server) Accepted() int { return len(s.Conns()) }

// Receipts lists every request stream received, in the order its HEADERS
// arrived (replaysafetest.Scripted).
func (s *Server) Receipts() []replaysafetest.Receipt {
	rs := s.Requests()
	out := make([]replaysafetest.Receipt, len(rs))
	for i, r := range rs {
		out[i] = replaysafetest.Receipt{
			Conn: r.Conn, Method: r.Method, Path: r.Path, Body: r.Body,
			Complete:    r.FIN,
			Unprocessed: r.Ignored || r.Action == KindReject,
		}
	}
	return out
}
