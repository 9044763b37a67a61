package h2

import (
	"math"
	"time"
)

// Defaults of Config, and the fixed bounds of the connection. Every value
// the server can make grow is bounded by one of them; the test that hits
// each bound is named after it.
const (
	// DefaultMaxHeaderListSize is the default of Config.MaxHeaderListSize:
	// 10 MiB, as net/http and x/net.
	DefaultMaxHeaderListSize = 10 << 20
	// DefaultMaxConcurrentStreams is the default of
	// Config.MaxConcurrentStreams: our own cap on streams at once,
	// whatever the server allows.
	DefaultMaxConcurrentStreams = 1000
	// DefaultStreamWindow is the default of Config.StreamWindow: the
	// most response body bytes one stream buffers before the caller
	// reads them.
	DefaultStreamWindow = 4 << 20
	// DefaultConnWindow is the default of Config.ConnWindow: the most
	// response body bytes the whole connection buffers before callers
	// read them. It bounds the memory a connection holds for unread
	// bodies; four streams whose bodies are not read can fill it.
	DefaultConnWindow = 16 << 20
	// MinWindow is the smallest receive window: the HTTP/2 initial
	// window (RFC 9113 §6.9.2), which the server may use before it has
	// seen our SETTINGS. Smaller StreamWindow and ConnWindow values are
	// raised to it.
	MinWindow = 65535
	// DefaultMaxReadFrameSize is the default of Config.MaxReadFrameSize:
	// the HTTP/2 default and minimum, 16 KiB, which also sizes the
	// connection's read buffer.
	DefaultMaxReadFrameSize = 1 << 14
	// DefaultPingAfter is the default of Config.PingAfter: how long the
	// connection waits without reading anything, while a stream is
	// waiting, before it sends a liveness PING.
	DefaultPingAfter = 2 * time.Second
	// DefaultPingTimeout is the default of Config.PingTimeout: how long
	// a liveness PING waits for its ACK (or for any frame) before the
	// connection is declared dead. With DefaultPingAfter, a silent peer
	// is detected within about 4 s of its last frame.
	DefaultPingTimeout = 2 * time.Second
	// DefaultSettingsTimeout is the default of Config.SettingsTimeout:
	// how long the server has to send its first SETTINGS frame and to
	// acknowledge ours (RFC 9113 §6.5.3, SETTINGS_TIMEOUT).
	DefaultSettingsTimeout = 10 * time.Second
	// DefaultMaxInformational is the default of Config.MaxInformational:
	// the most interim (1xx) responses one stream accepts.
	DefaultMaxInformational = 10
	// DefaultMaxQueuedControlFrames is the default of
	// Config.MaxQueuedControlFrames: the most frames the server can make
	// us owe it (SETTINGS and PING acknowledgements) while our writes do
	// not drain. Past it the connection ends with ENHANCE_YOUR_CALM.
	DefaultMaxQueuedControlFrames = 10000
	// MaxHeaderBlockFrames bounds the frames (one HEADERS and its
	// CONTINUATIONs) of one header block: past it the connection ends
	// with ENHANCE_YOUR_CALM. x/net's Framer bounds the bytes of a block
	// but not the frames, so a stream of empty CONTINUATION frames would
	// otherwise never end. When MaxHeaderListSize needs more 16 KiB
	// frames than this, the bound grows to fit.
	MaxHeaderBlockFrames = 1024
	// MaxGoAwayDebug bounds the copy of a GOAWAY's debug data the
	// connection keeps and reports.
	MaxGoAwayDebug = 1024
	// DefaultUserAgent is the User-Agent a request without one gets, as
	// x/net sends it.
	DefaultUserAgent = "Go-http-client/2.0"
)

// Protocol constants (RFC 9113).
const (
	initialWindow         = 65535     // §6.9.2
	maxWindow             = 1<<31 - 1 // §6.9.1
	minMaxFrameSize       = 1 << 14   // §6.5.2
	maxMaxFrameSize       = 1<<24 - 1
	maxStreamID           = 1<<31 - 1 // §5.1.1
	frameHeaderLen        = 9
	defaultPeerMaxStreams = 100  // assumed until the server's SETTINGS, like x/net
	headerTableSize       = 4096 // the HPACK dynamic table we accept (default, not sent)
)

// Config configures a ClientConn. The zero Config is usable: every field
// documents its default.
type Config struct {
	// MaxHeaderListSize is the response header list size (RFC 9113
	// §6.5.2: names, values and 32 octets per field) that we advertise
	// in SETTINGS_MAX_HEADER_LIST_SIZE and enforce: a larger response
	// header section, or interim responses and final header section
	// adding up to more, resets the stream. It also bounds the request
	// header section we send, together with the server's own
	// SETTINGS_MAX_HEADER_LIST_SIZE. Zero means
	// DefaultMaxHeaderListSize (10 MiB).
	MaxHeaderListSize uint32
	// MaxConcurrentStreams is our own cap on the streams open at once,
	// whatever the server's SETTINGS_MAX_CONCURRENT_STREAMS allows. Zero
	// or negative means DefaultMaxConcurrentStreams (1000).
	MaxConcurrentStreams int
	// StreamWindow is each stream's receive window, advertised as
	// SETTINGS_INITIAL_WINDOW_SIZE: the most response body bytes a
	// stream buffers unread. Zero means DefaultStreamWindow (4 MiB);
	// values below MinWindow are raised to it.
	StreamWindow int32
	// ConnWindow is the connection's receive window: the most response
	// body bytes all streams together buffer unread. Zero means
	// DefaultConnWindow (16 MiB); values below MinWindow are raised to
	// it.
	ConnWindow int32
	// MaxReadFrameSize is the largest frame payload we accept,
	// advertised as SETTINGS_MAX_FRAME_SIZE. Zero means
	// DefaultMaxReadFrameSize (16 KiB); other values are clamped to
	// [16 KiB, 16 MiB-1].
	MaxReadFrameSize uint32
	// PingAfter is how long a connection with at least one open stream
	// may go without reading a frame before it sends a liveness PING.
	// Zero means DefaultPingAfter (2 s); a negative value disables the
	// liveness PING (and PingTimeout).
	PingAfter time.Duration
	// PingTimeout is how long a liveness PING waits for the server to
	// send anything (its ACK or any other frame) before the connection
	// is declared dead with a *TimeoutError of kind TimeoutPing. Zero
	// means DefaultPingTimeout (2 s).
	PingTimeout time.Duration
	// SettingsTimeout is how long after NewClientConn the server has to
	// send its first SETTINGS frame and acknowledge ours; past it the
	// connection ends with SETTINGS_TIMEOUT and a *TimeoutError of kind
	// TimeoutSettings. Zero means DefaultSettingsTimeout (10 s); a
	// negative value disables it.
	SettingsTimeout time.Duration
	// WriteByteTimeout, when positive, bounds how long a socket write
	// may go without making progress; past it the write fails (a
	// *WriteError) and the connection ends. Zero means no bound: a
	// stuck write is then caught by the liveness PING while a stream
	// waits.
	WriteByteTimeout time.Duration
	// DisableCompression, when false, makes a request that sets no
	// Accept-Encoding (and is not HEAD and has no Range) ask for gzip
	// and decode a gzip response transparently, as net/http does.
	DisableCompression bool
	// MaxInformational is the most interim (1xx) responses one stream
	// accepts; one more resets the stream. Zero or negative means
	// DefaultMaxInformational (10). Their header bytes count toward
	// MaxHeaderListSize together with the final response's.
	MaxInformational int
	// MaxQueuedControlFrames bounds the acknowledgements (of SETTINGS
	// and PING) the server can make us queue while our writes do not
	// drain; past it the connection ends with ENHANCE_YOUR_CALM. Zero
	// or negative means DefaultMaxQueuedControlFrames (10000).
	MaxQueuedControlFrames int
}

// config is a Config with every default filled in.
type config struct {
	maxHeaderList    uint32
	maxStreams       int
	streamWindow     int64
	connWindow       int64
	maxReadFrame     uint32
	pingAfter        time.Duration // 0: liveness disabled
	pingTimeout      time.Duration
	settingsTimeout  time.Duration // 0: disabled
	writeByteTimeout time.Duration
	compression      bool
	max1xx           int
	maxControl       int
	maxBlockFrames   int
	maxBlockBytes    int64
}

func (c Config) normalize() config {
	n := config{
		maxHeaderList:    c.MaxHeaderListSize,
		maxStreams:       c.MaxConcurrentStreams,
		streamWindow:     int64(c.StreamWindow),
		connWindow:       int64(c.ConnWindow),
		maxReadFrame:     c.MaxReadFrameSize,
		pingAfter:        c.PingAfter,
		pingTimeout:      c.PingTimeout,
		settingsTimeout:  c.SettingsTimeout,
		writeByteTimeout: c.WriteByteTimeout,
		compression:      !c.DisableCompression,
		max1xx:           c.MaxInformational,
		maxControl:       c.MaxQueuedControlFrames,
	}
	if n.maxHeaderList == 0 {
		n.maxHeaderList = DefaultMaxHeaderListSize
	}
	if n.maxStreams <= 0 {
		n.maxStreams = DefaultMaxConcurrentStreams
	}
	if n.streamWindow == 0 {
		n.streamWindow = DefaultStreamWindow
	}
	n.streamWindow = max(n.streamWindow, MinWindow)
	if n.connWindow == 0 {
		n.connWindow = DefaultConnWindow
	}
	n.connWindow = max(n.connWindow, MinWindow)
	if n.maxReadFrame == 0 {
		n.maxReadFrame = DefaultMaxReadFrameSize
	}
	n.maxReadFrame = min(max(n.maxReadFrame, minMaxFrameSize), maxMaxFrameSize)
	switch {
	case n.pingAfter < 0:
		n.pingAfter, n.pingTimeout = 0, 0
	case n.pingAfter == 0:
		n.pingAfter = DefaultPingAfter
	}
	if n.pingAfter > 0 && n.pingTimeout <= 0 {
		n.pingTimeout = DefaultPingTimeout
	}
	switch {
	case n.settingsTimeout < 0:
		n.settingsTimeout = 0
	case n.settingsTimeout == 0:
		n.settingsTimeout = DefaultSettingsTimeout
	}
	n.writeByteTimeout = max(n.writeByteTimeout, 0)
	if n.max1xx <= 0 {
		n.max1xx = DefaultMaxInformational
	}
	n.max1xx = min(n.max1xx, math.MaxInt32) // a stream counts its interim responses in an int32
	if n.maxControl <= 0 {
		n.maxControl = DefaultMaxQueuedControlFrames
	}
	// A header block may take twice the list size in encoded bytes (as
	// x/net's Framer allows) and as many 16 KiB frames as that needs.
	n.maxBlockBytes = 2 * int64(n.maxHeaderList)
	n.maxBlockFrames = max(MaxHeaderBlockFrames, int(n.maxBlockBytes/minMaxFrameSize)+1)
	return n
}
