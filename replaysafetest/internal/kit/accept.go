package kit

import (
	"errors"
	"net"
	"time"
)

// AcceptTCP accepts connections on ln and hands each to admit until ln
// closes, done closes, or admit returns false. A transient failure (out of
// file descriptors) is logged and retried after 10 ms, so a server under
// a descriptor flood goes on once descriptors come back.
func AcceptTCP(ln net.Listener, done <-chan struct{}, logf func(string, ...any), admit func(*net.TCPConn) bool) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			logf("accept: %v", err)
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		tcp, ok := nc.(*net.TCPConn)
		if !ok { // cannot happen with a TCP listener
			nc.Close()
			continue
		}
		if !admit(tcp) {
			return
		}
	}
}
