package udprelay

import (
	"bytes"
	"net"
	"strconv"
	"testing"
	"time"
)

// echo starts a UDP server on 127.0.0.1 that sends every datagram back.
func echo(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			c.WriteToUDP(buf[:n], from)
		}
	}()
	t.Cleanup(func() { c.Close() })
	return c
}

func dialRelay(t *testing.T, r *Relay) *net.UDPConn {
	t.Helper()
	a, _ := net.ResolveUDPAddr("udp", r.Addr())
	c, err := net.DialUDP("udp", nil, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRelayPassesInOrder: datagrams go through both ways intact and in
// order.
func TestRelayPassesInOrder(t *testing.T) {
	e := echo(t)
	r, err := New(e.LocalAddr().String(), time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := dialRelay(t, r)
	for i := range 20 {
		c.Write([]byte("datagram " + strconv.Itoa(i)))
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2048)
	for i := range 20 {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if want := "datagram " + strconv.Itoa(i); !bytes.Equal(buf[:n], []byte(want)) {
			t.Fatalf("got %q, want %q", buf[:n], want)
		}
	}
	if r.Dropped() != 0 {
		t.Errorf("%d dropped", r.Dropped())
	}
}

// TestRelayPeersBounded: a client past MaxPeers evicts the one heard from
// least recently; the relay never serves more than MaxPeers.
func TestRelayPeersBounded(t *testing.T) {
	e := echo(t)
	r, err := New(e.LocalAddr().String(), time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range MaxPeers + 8 {
		c := dialRelay(t, r)
		c.Write([]byte{byte(i)})
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 16)
		if _, err := c.Read(buf); err != nil { // the peer exists once its datagram came back
			t.Fatalf("client %d: %v", i, err)
		}
		if r.Peers() > MaxPeers {
			t.Fatalf("%d peers, over %d", r.Peers(), MaxPeers)
		}
	}
	if r.Peers() != MaxPeers || r.Evicted() != 8 {
		t.Fatalf("%d peers, %d evicted; want %d and 8", r.Peers(), r.Evicted(), MaxPeers)
	}
}
