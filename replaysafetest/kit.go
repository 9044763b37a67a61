package replaysafetest

// Scripted is what every scripted server of this kit has in common: the
// HTTP/1.1 origin of this package (Server), h2server, h3server and the
// CONNECT proxy of connectproxy. A test written against Scripted counts
// copies the same way whatever the protocol.
type Scripted interface {
	// Addr is the listening address, host:port, on 127.0.0.1.
	Addr() string
	// URL is the base URL a client uses: http:// or https://.
	URL() string
	// Accepted is the number of connections accepted so far.
	Accepted() int
	// Receipts lists every request received so far, in arrival order,
	// including those the server then refused, reset or never read in
	// full.
	Receipts() []Receipt
	// Close stops the server and every goroutine it started; the records
	// stay readable.
	Close() error
}

// Receipt is one request as a scripted server received it, reduced to
// what counting copies needs.
type Receipt struct {
	// Conn is the connection's index in accept order, from 0.
	Conn int
	// Method and Path are the request's method and target (path and
	// query; for a CONNECT, host:port).
	Method, Path string
	// Body is the request body as received.
	Body []byte
	// Raw is the request's exact bytes on the wire where the protocol
	// has them (HTTP/1.1), else nil.
	Raw []byte
	// Complete reports that the whole request arrived.
	Complete bool
	// Unprocessed reports that the server promised the client it did not
	// process the request: refused (REFUSED_STREAM, H3_REQUEST_REJECTED)
	// or above a GOAWAY.
	Unprocessed bool
}

// Copies counts the receipts per path: the copies of each request a
// client sent, when every request carries its own path (a request id in
// the query, for example).
func Copies(s Scripted) map[string]int {
	m := make(map[string]int)
	for _, r := range s.Receipts() {
		m[r.Path]++
	}
	return m
}

var _ Scripted = (*Server)(nil)

// Accepted returns the number of connections accepted so far (Conns).
func (s *Server) Accepted() int { return s.Conns() }

// Receipts lists the complete requests, then the partial ones.
func (s *Server) Receipts() []Receipt {
	var out []Receipt
	for _, r := range s.Requests() {
		out = append(out, Receipt{Conn: r.Conn, Method: r.Method, Path: r.Target, Body: r.Body, Raw: r.Raw, Complete: true})
	}
	for _, r := range s.Partial() {
		out = append(out, Receipt{Conn: r.Conn, Method: r.Method, Path: r.Target, Body: r.Body, Raw: r.Raw})
	}
	return out
}
