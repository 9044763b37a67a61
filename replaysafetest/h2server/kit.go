package h2server

import "github.com/replaysafe/replaysafe/replaysafetest"

var _ replaysafetest.Scripted = (*Server)(nil)

// Receipts lists every stream received, in the order its HEADERS
// arrived (replaysafetest.Scripted).
func (s *Server) Receipts() []replaysafetest.Receipt {
	rs := s.Requests()
	out := make([]replaysafetest.Receipt, len(rs))
	for i, r := range rs {
		out[i] = replaysafetest.Receipt{
			Conn: r.Conn, Method: r.Method, Path: r.Path, Body: r.Body,
			Complete:    r.EndStream,
			Unprocessed: r.Ignored || r.Action == KindRefuse,
		}
	}
	return out
}
