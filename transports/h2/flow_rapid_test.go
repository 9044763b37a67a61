package h2

import (
	"testing"

	"golang.org/x/net/http2"
	"pgregory.net/rapid"
)

// flowModel is the plain model of HTTP/2 flow control that the machine
// is checked against (STYLE 10): each side's view of every window, kept
// by the dumbest possible bookkeeping.
type flowModel struct {
	streamWindow, connWindow int64 // what we advertise

	// The server's view of what it may send us (updated only when our
	// WINDOW_UPDATE frames reach it, on flush).
	peerConnAvail int64
	// Our view of what we may send the server.
	peerInit    int64
	connSendWin int64
	buffered    int64 // unread response bytes on every stream
	streams     map[uint32]*modelStream
	order       []uint32
}

type modelStream struct {
	st        *stream
	peerAvail int64 // the server's view of the stream window
	buffered  int64
	sendWin   int64
	upload    bool
	ended     bool // the server ended its side
	closed    bool // the caller closed the body
}

func TestFlowControlModel(t *testing.T) {
	rapid.Check(t, checkFlowControl)
}

// FuzzFlowControlModel runs the same property from go test -fuzz.
func FuzzFlowControlModel(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(checkFlowControl))
}

func checkFlowControl(rt *rapid.T) {
	sw := rapid.Int64Range(MinWindow, 1<<20).Draw(rt, "streamWindow")
	cw := rapid.Int64Range(MinWindow, 1<<21).Draw(rt, "connWindow")
	h := settled(rt, Config{StreamWindow: int32(sw), ConnWindow: int32(cw), MaxReadFrameSize: 1 << 14})
	m := &flowModel{
		streamWindow: sw, connWindow: cw,
		peerConnAvail: cw, peerInit: initialWindow, connSendWin: initialWindow,
		streams: map[uint32]*modelStream{},
	}

	openable := func() bool { return len(m.streams) < 8 && h.m.canTake() }
	// An action that does not fit the state does nothing rather than
	// skip: under go test -fuzz a spent input draws the same action
	// every time, and rapid gives up after a run of skipped actions
	// ("can't find a valid action"), failing a state that is fine.
	pick := func(rt *rapid.T, ok func(*modelStream) bool) *modelStream {
		var ids []uint32
		for _, id := range m.order {
			if s := m.streams[id]; s != nil && ok(s) {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		return m.streams[rapid.SampledFrom(ids).Draw(rt, "stream")]
	}

	rt.Repeat(map[string]func(*rapid.T){
		"open": func(rt *rapid.T) {
			if !openable() {
				return
			}
			upload := rapid.Bool().Draw(rt, "upload")
			var st *stream
			if upload {
				st = h.post("/", 1<<30)
			} else {
				st = h.get("/")
			}
			// The server answers with a header section at once.
			h.flush(m)
			h.headers(st.id, false, ":status", "200")
			h.pump()
			m.streams[st.id] = &modelStream{st: st, peerAvail: sw, sendWin: m.peerInit, upload: upload}
			m.order = append(m.order, st.id)
		},
		"dataIn": func(rt *rapid.T) {
			s := pick(rt, func(s *modelStream) bool { return !s.ended })
			if s == nil {
				return
			}
			most := min(s.peerAvail, m.peerConnAvail, 1<<14)
			if most == 0 {
				return
			}
			n := rapid.Int64Range(0, most).Draw(rt, "n")
			pad := rapid.Int64Range(0, min(most-n, 255)).Draw(rt, "pad")
			if pad > 0 && n+pad+1 > most {
				pad = 0
			}
			end := rapid.IntRange(0, 9).Draw(rt, "end") == 0
			data := make([]byte, n)
			if pad > 0 {
				h.sfr.WriteDataPadded(s.st.id, end, data, make([]byte, pad))
				n += pad + 1 // flow control counts the whole payload
			} else {
				h.sfr.WriteData(s.st.id, end, data)
			}
			h.pump()
			s.peerAvail -= n
			m.peerConnAvail -= n
			got := int64(len(data))
			if s.closed {
				got = 0
			}
			s.buffered += got
			m.buffered += got
			if end {
				s.ended = true
			}
		},
		"read": func(rt *rapid.T) {
			s := pick(rt, func(s *modelStream) bool { return s.buffered > 0 })
			if s == nil {
				return
			}
			k := rapid.Int64Range(1, s.buffered).Draw(rt, "k")
			n, err, _ := h.m.readBody(s.st, make([]byte, k))
			if err != nil || int64(n) != k {
				rt.Fatalf("readBody(%d) = %d, %v", k, n, err)
			}
			s.buffered -= k
			m.buffered -= k
		},
		"closeBody": func(rt *rapid.T) {
			s := pick(rt, func(s *modelStream) bool { return !s.closed })
			if s == nil {
				return
			}
			h.m.closeBody(h.now, s.st)
			m.buffered -= s.buffered
			s.buffered = 0
			s.closed = true
			if !s.ended { // reset by us: the server learns on flush and stops
				s.ended = true
			}
		},
		"windowUpdateIn": func(rt *rapid.T) {
			s := pick(rt, func(s *modelStream) bool { return s.upload && s.st.open })
			if s == nil {
				return
			}
			conn := rapid.Bool().Draw(rt, "conn")
			if conn {
				inc := rapid.Int64Range(1, min(maxWindow-m.connSendWin, 1<<20)).Draw(rt, "inc")
				h.sfr.WriteWindowUpdate(0, uint32(inc))
				m.connSendWin += inc
			} else {
				inc := rapid.Int64Range(1, min(maxWindow-s.sendWin, 1<<20)).Draw(rt, "inc")
				h.sfr.WriteWindowUpdate(s.st.id, uint32(inc))
				s.sendWin += inc
			}
			h.pump()
		},
		"initialWindowIn": func(rt *rapid.T) {
			v := rapid.Int64Range(0, 1<<20).Draw(rt, "initialWindow")
			delta := v - m.peerInit
			for _, s := range m.streams {
				if s.st.open && s.sendWin+delta > maxWindow {
					return // the server would break the protocol
				}
			}
			h.sfr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(v)})
			h.pump()
			m.peerInit = v
			for _, s := range m.streams {
				if s.st.open {
					s.sendWin += delta
				}
			}
		},
		"upload": func(rt *rapid.T) {
			s := pick(rt, func(s *modelStream) bool { return s.upload && s.st.open && s.st.stopUpload == nil })
			if s == nil {
				return
			}
			want := rapid.IntRange(0, 100000).Draw(rt, "bytes")
			n, _, err := h.m.sendBody(h.now, s.st, make([]byte, want), false)
			if err != nil {
				rt.Fatalf("sendBody: %v", err)
			}
			if allowed := max(min(s.sendWin, m.connSendWin), 0); int64(n) > allowed {
				rt.Fatalf("queued %d body bytes with %d of window", n, allowed)
			}
			s.sendWin -= int64(n)
			m.connSendWin -= int64(n)
			h.flush(m)
		},
		"flush": func(rt *rapid.T) { h.flush(m) },
		"": func(rt *rapid.T) {
			if h.m.closed {
				rt.Fatalf("connection ended: %v", h.m.err)
			}
			var totalBuffered int64
			for _, s := range m.streams {
				st := s.st
				if int64(st.buf.n) != s.buffered {
					rt.Fatalf("stream %d buffers %d, model %d", st.id, st.buf.n, s.buffered)
				}
				if int64(st.buf.n) > sw {
					rt.Fatalf("stream %d buffers %d > window %d", st.id, st.buf.n, sw)
				}
				totalBuffered += int64(st.buf.n)
				if st.open && st.phase != respDone {
					// What the server may still send, plus what we hold
					// unread or not yet credited, is the window.
					if got := int64(st.recvWindow) + int64(st.buf.n) + int64(st.unacked); got != sw {
						rt.Fatalf("stream %d: window %d + buffered %d + unacked %d = %d, want %d",
							st.id, st.recvWindow, st.buf.n, st.unacked, got, sw)
					}
					if st.sendWindow != s.sendWin {
						rt.Fatalf("stream %d send window %d, model %d", st.id, st.sendWindow, s.sendWin)
					}
				}
			}
			if totalBuffered != m.buffered || totalBuffered > cw {
				rt.Fatalf("buffered %d, model %d, connection window %d", totalBuffered, m.buffered, cw)
			}
			if got := h.m.recvWindow + totalBuffered + h.m.connUnacked; got != cw {
				rt.Fatalf("connection: window %d + buffered %d + unacked %d = %d, want %d",
					h.m.recvWindow, totalBuffered, h.m.connUnacked, got, cw)
			}
			if h.m.sendWindow != m.connSendWin {
				rt.Fatalf("connection send window %d, model %d", h.m.sendWindow, m.connSendWin)
			}
			if h.m.recvWindow < m.peerConnAvail {
				rt.Fatalf("the server may send %d, we accept %d", m.peerConnAvail, h.m.recvWindow)
			}
		},
	})
}

// flush writes what the machine queued and lets the model's server see
// our WINDOW_UPDATE and RST_STREAM frames.
func (h *harness) flush(m *flowModel) {
	for _, f := range h.sent() {
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				m.peerConnAvail += int64(f.Increment)
			} else if s := m.streams[f.StreamID]; s != nil {
				s.peerAvail += int64(f.Increment)
			}
		case *http2.RSTStreamFrame:
			if s := m.streams[f.StreamID]; s != nil {
				s.ended = true
			}
		}
	}
}
