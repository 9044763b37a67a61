package driver

import (
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/replaysafe/replaysafe/adapters/h3"
)

// TestQUICConfigLiveness: without a QUICConfig a connection gets the
// liveness defaults (a keep-alive PING after 1 s of silence, dead after
// 4 s idle: a vanished server found within 5 s); a caller's QUICConfig
// keeps its own values, cloned, with the tracer and the stream limit
// replaced.
func TestQUICConfigLiveness(t *testing.T) {
	def := (&Transport{}).quicConfig(h3.NewWatch())
	if def.KeepAlivePeriod != time.Second || def.MaxIdleTimeout != 4*time.Second {
		t.Errorf("defaults: keep-alive %v, idle timeout %v; want 1s and 4s", def.KeepAlivePeriod, def.MaxIdleTimeout)
	}
	if def.KeepAlivePeriod+def.MaxIdleTimeout > 6*time.Second {
		t.Errorf("a vanished server is found after up to %v, want within 6s", def.KeepAlivePeriod+def.MaxIdleTimeout)
	}
	own := &quic.Config{KeepAlivePeriod: 10 * time.Second, MaxIdleTimeout: 30 * time.Second}
	got := (&Transport{cfg: Config{QUICConfig: own}}).quicConfig(h3.NewWatch())
	if got == own || got.KeepAlivePeriod != 10*time.Second || got.MaxIdleTimeout != 30*time.Second || got.MaxIncomingStreams != -1 || got.Tracer == nil {
		t.Errorf("caller's config: %+v", got)
	}
}
