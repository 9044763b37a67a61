package replaysafe

import (
	"net/http"
	"testing"
	"time"

	"github.com/replaysafe/replaysafe/transports/h2"
)

// TestH2ConfigMapsHTTP2Config: every HTTP2Config field a client has the
// notion of lands in the connection's Config with its meaning; values
// net/http calls invalid, and zero ones, keep the connection's defaults
// (the zero h2.Config field); a negative SendPingTimeout turns the
// liveness PING off.
func TestH2ConfigMapsHTTP2Config(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *http.HTTP2Config
		want h2.Config
	}{
		{"nil", nil, h2.Config{}},
		{"zero", &http.HTTP2Config{}, h2.Config{}},
		{"all set", &http.HTTP2Config{
			MaxReadFrameSize: 1 << 20, MaxReceiveBufferPerStream: 1 << 20, MaxReceiveBufferPerConnection: 2 << 20,
			SendPingTimeout: 3 * time.Second, PingTimeout: 4 * time.Second, WriteByteTimeout: 5 * time.Second,
			MaxConcurrentStreams: 7, StrictMaxConcurrentRequests: true, MaxDecoderHeaderTableSize: 1 << 16,
		}, h2.Config{
			MaxReadFrameSize: 1 << 20, StreamWindow: 1 << 20, ConnWindow: 2 << 20,
			PingAfter: 3 * time.Second, PingTimeout: 4 * time.Second, WriteByteTimeout: 5 * time.Second,
		}},
		{"no liveness PING", &http.HTTP2Config{SendPingTimeout: -1}, h2.Config{PingAfter: -1}},
		{"invalid sizes", &http.HTTP2Config{
			MaxReadFrameSize: 1 << 10, MaxReceiveBufferPerStream: -1, MaxReceiveBufferPerConnection: 1 << 10,
			PingTimeout: -time.Second, WriteByteTimeout: -time.Second,
		}, h2.Config{}},
	} {
		if got := h2Config(tc.in); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
