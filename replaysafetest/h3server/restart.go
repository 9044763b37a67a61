package h3server

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=KillMode -linecomment -output=enum_string.go

import (
	"errors"
	"sync"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// KillMode says how Kill ends the server's connections.
type KillMode uint8

// Kill modes.
const (
	// KillClose sends every connection CONNECTION_CLOSE(H3_NO_ERROR), as
	// a server that closes its connections on its way down.
	KillClose KillMode = iota // close
	// KillSilent ends every connection without a packet, as a process
	// killed with SIGKILL or a host that lost power: the client hears
	// nothing, and after Listen no stateless reset either (the server
	// keeps no reset key), so it learns of the loss only by its own idle
	// timeout.
	KillSilent // silent
)

// errListening and errDown are a Listen and a Kill out of turn.
var (
	errListening = errors.New("h3server: already listening")
	errDown      = errors.New("h3server: already killed")
)

// Kill stops the server as a process dies: every connection ends at once
// as mode says, and the UDP port is closed, so that datagrams sent to it
// are lost (over loopback the kernel answers ICMP port unreachable, which
// a client reads as ECONNREFUSED on a connected UDP socket and never sees
// on an unconnected one, quic-go's). It returns once every connection is
// recorded over. The records stay; Listen opens the port again. Kill
// returns ErrClosed after Close, and an error when already killed.
func (s *Server) Kill(mode KillMode) error {
	s.restartMu.Lock()
	defer s.restartMu.Unlock()
	s.core.Mu.Lock()
	switch {
	case s.closed:
		s.core.Mu.Unlock()
		return ErrClosed
	case s.down:
		s.core.Mu.Unlock()
		return errDown
	}
	sock := s.sock
	s.sock, s.down = socket{}, true
	live := s.liveLocked()
	s.core.Mu.Unlock()
	s.core.Logf("killed (%v): %d connections", mode, len(live))

	if mode == KillClose {
		// As a server goes down: it stops accepting first, so that no
		// client dialing again meanwhile completes a handshake with it
		// (quic-go would then refuse that connection with
		// CONNECTION_REFUSED), then closes its connections.
		sock.ln.Close()
		var wg sync.WaitGroup
		for _, c := range live {
			wg.Go(func() { c.close(http3.ErrCodeNoError, "h3server: restarting") })
		}
		wg.Wait()
	}
	// Closing the transport ends the connections left (all of them when
	// silent) without sending anything.
	sock.release()
	// The accept loop is over: no connection joins now.
	s.core.Mu.Lock()
	live = s.liveLocked()
	s.core.Mu.Unlock()
	for _, c := range live {
		<-c.done
	}
	return nil
}

// Listen opens the port again after Kill, on the same address, with the
// same certificate and configuration; the connections it accepts carry
// on the indexes and the scripts (Config.Conns) where the earlier ones
// stopped. It fails when the address was taken meanwhile, returns
// ErrClosed after Close, and an error when the server is listening.
func (s *Server) Listen() error {
	s.restartMu.Lock()
	defer s.restartMu.Unlock()
	s.core.Mu.Lock()
	defer s.core.Mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case !s.down:
		return errListening
	}
	sock, err := listen(s.addr, s.tlsCfg, s.cfg.quicConfig())
	if err != nil {
		return err
	}
	s.sock, s.down = sock, false
	s.core.Go(func() { s.acceptLoop(sock) })
	s.core.Logf("listening again on %s", s.addr)
	return nil
}

// Restart kills the server (Kill with mode), leaves its port closed for
// down, and listens again (Listen): a process restart. It returns
// ErrClosed when the server is closed meanwhile.
func (s *Server) Restart(mode KillMode, down time.Duration) error {
	if err := s.Kill(mode); err != nil {
		return err
	}
	t := time.NewTimer(down)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.ctx.Done():
		return ErrClosed
	}
	return s.Listen()
}
