package bench

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Server is a loopback origin for the throughput and memory benchmarks:
// it answers every request 200 "ok" and can hold its answers behind a
// Gate.
type Server interface {
	// URL is the base URL ("http://127.0.0.1:port").
	URL() string
	// Addr is "127.0.0.1:port".
	Addr() string
	// Addrs are the addresses of every origin the server serves: Addr
	// alone, except for an HTTP/3 server started with several origins.
	Addrs() []string
	// ClientTLS returns the client TLS configuration trusting the server,
	// or nil for cleartext.
	ClientTLS() *tls.Config
	// SetGate makes the server hold every answer until g opens; nil
	// answers at once.
	SetGate(g *Gate)
	// Ready returns the number of connections open at the server whose
	// per-connection state is set up.
	Ready() int
	// Close stops the server and waits for its goroutines.
	Close() error
}

// Gate holds a server's answers until it is opened, so that a benchmark
// can keep requests in flight.
type Gate struct {
	arrived atomic.Int64
	open    chan struct{}
	once    sync.Once
}

// NewGate returns a closed gate.
func NewGate() *Gate { return &Gate{open: make(chan struct{})} }

// Arrived returns the number of requests held at the gate so far.
func (g *Gate) Arrived() int { return int(g.arrived.Load()) }

// Open releases every held answer and every later one.
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }

// waitFor polls cond until it holds or timeout passes. Only setup code
// (never a timed section) waits this way.
func waitFor(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("bench: timed out waiting for the server")
		}
		time.Sleep(100 * time.Microsecond)
	}
	return nil
}

// listener is what both servers share: the listener, the open
// connections, and the goroutines to wait for.
type listener struct {
	ln    net.Listener
	gate  atomic.Pointer[Gate]
	ready atomic.Int64
	done  chan struct{}

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func listen(serve func(*listener, net.Conn)) (*listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &listener{ln: ln, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			select {
			case <-l.done:
				l.mu.Unlock()
				c.Close()
				return
			default:
			}
			l.conns[c] = struct{}{}
			l.wg.Add(1)
			l.mu.Unlock()
			go func() {
				defer l.wg.Done()
				serve(l, c)
				c.Close()
				l.mu.Lock()
				delete(l.conns, c)
				l.mu.Unlock()
			}()
		}
	}()
	return l, nil
}

func (l *listener) Addr() string           { return l.ln.Addr().String() }
func (l *listener) Addrs() []string        { return []string{l.Addr()} }
func (l *listener) URL() string            { return "http://" + l.Addr() }
func (l *listener) ClientTLS() *tls.Config { return nil }
func (l *listener) SetGate(g *Gate)        { l.gate.Store(g) }
func (l *listener) Ready() int             { return int(l.ready.Load()) }

// hold waits at the current gate, if any; false means the server closed.
func (l *listener) hold() bool {
	g := l.gate.Load()
	if g == nil {
		return true
	}
	g.arrived.Add(1)
	select {
	case <-g.open:
		return true
	case <-l.done:
		return false
	}
}

func (l *listener) Close() error {
	l.mu.Lock()
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

// h1Response is the whole answer of the HTTP/1.1 server.
var h1Response = []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok")

// StartH1 starts the HTTP/1.1 keep-alive server: it reads each request's
// header section and Content-Length body, and answers 200 "ok". It does
// not speak chunked request bodies (the benchmarks send none).
func StartH1() (Server, error) {
	return listen(serveH1)
}

func serveH1(l *listener, c net.Conn) {
	br := bufio.NewReaderSize(c, 8<<10)
	bw := bufio.NewWriterSize(c, 4<<10)
	l.ready.Add(1)
	defer l.ready.Add(-1)
	for {
		length := 0
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 {
				break // the empty line ending the header section
			}
			if n, ok := contentLength(line); ok {
				length = n
			}
		}
		if _, err := br.Discard(length); err != nil {
			return
		}
		if !l.hold() {
			return
		}
		if _, err := bw.Write(h1Response); err != nil {
			return
		}
		if br.Buffered() == 0 { // nothing pipelined behind: send now
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

// contentLength parses a Content-Length header line.
func contentLength(line []byte) (int, bool) {
	const name = "content-length:"
	if len(line) < len(name) || !bytes.EqualFold(line[:len(name)], []byte(name)) {
		return 0, false
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(line[len(name):])))
	return n, err == nil
}

// h2Header is the response header block: :status 200 and content-length
// 2, never indexed, so that sending the same bytes on every stream leaves
// the client's HPACK table alone.
var h2Header = func() []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200", Sensitive: true})
	enc.WriteField(hpack.HeaderField{Name: "content-length", Value: "2", Sensitive: true})
	return buf.Bytes()
}()

var h2Body = []byte("ok")

// StartH2C starts the HTTP/2 server, cleartext with prior knowledge: it
// answers every stream 200 "ok" once the request ended, advertising
// maxStreams as SETTINGS_MAX_CONCURRENT_STREAMS. It works frame by frame
// (x/net's Framer), does not decode request headers, grants connection
// flow-control window for every DATA frame, and ignores the client's
// window (its answers are two bytes).
func StartH2C(maxStreams uint32) (Server, error) {
	return listen(func(l *listener, c net.Conn) { serveH2(l, c, maxStreams) })
}

func serveH2(l *listener, c net.Conn, maxStreams uint32) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	br := bufio.NewReaderSize(c, 16<<10)
	bw := bufio.NewWriterSize(c, 16<<10)
	fr := http2.NewFramer(bw, br)
	fr.SetReuseFrames()
	l.ready.Add(1)
	defer l.ready.Add(-1)

	var (
		wmu     sync.Mutex // fr's writes and bw, shared with the releaser
		pending []uint32   // streams held at the gate
		waiting bool       // a releaser goroutine waits at the gate
		werr    error
	)
	answer := func(id uint32) {
		if werr == nil {
			werr = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h2Header, EndHeaders: true})
		}
		if werr == nil {
			werr = fr.WriteData(id, true, h2Body)
		}
	}
	var releaser sync.WaitGroup
	defer releaser.Wait()
	end := func(id uint32) {
		g := l.gate.Load()
		if g == nil {
			answer(id)
			return
		}
		g.arrived.Add(1)
		pending = append(pending, id)
		if waiting {
			return
		}
		waiting = true
		releaser.Add(1)
		go func() {
			defer releaser.Done()
			select {
			case <-g.open:
			case <-l.done:
			}
			wmu.Lock()
			for _, id := range pending {
				answer(id)
			}
			pending, waiting = pending[:0], false
			if werr == nil {
				werr = bw.Flush()
			}
			wmu.Unlock()
		}()
	}

	wmu.Lock()
	werr = fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: maxStreams})
	if werr == nil {
		werr = bw.Flush()
	}
	wmu.Unlock()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		wmu.Lock()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && werr == nil {
				werr = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() && werr == nil {
				werr = fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				end(f.StreamID)
			}
		case *http2.DataFrame:
			if n := f.Header().Length; n > 0 && werr == nil {
				werr = fr.WriteWindowUpdate(0, n)
			}
			if f.StreamEnded() {
				end(f.StreamID)
			}
		case *http2.GoAwayFrame:
			wmu.Unlock()
			return
		}
		if werr == nil && br.Buffered() == 0 {
			werr = bw.Flush()
		}
		failed := werr != nil
		wmu.Unlock()
		if failed {
			return
		}
	}
}

// bareConns is bare connections, closed together.
type bareConns []net.Conn

func (b bareConns) Close() error {
	var errs []error
	for _, c := range b {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// bareTCP returns the Bare function of proto: it opens n connections to
// srv that do nothing more than a client must to be connected: TCP for
// HTTP/1.1; TCP, the preface and an empty SETTINGS frame for h2c. The
// memory benchmarks use them to measure what the server holds per
// connection.
func bareTCP(proto string) func(srv Server, n int) (io.Closer, error) {
	return func(srv Server, n int) (io.Closer, error) {
		var conns bareConns
		for range n {
			c, err := bareConn(proto, srv.Addr())
			if err != nil {
				conns.Close()
				return nil, err
			}
			conns = append(conns, c)
		}
		return conns, nil
	}
}

func bareConn(proto, addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil || proto != "h2" {
		return c, err
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		c.Close()
		return nil, err
	}
	if err := http2.NewFramer(c, nil).WriteSettings(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
