package replaysafe_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/plan"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// extendedConnect returns a WebSocket extended CONNECT (RFC 8441) to url.
func extendedConnect(t *testing.T, url string) *http.Request {
	t.Helper()
	req := newRequest(t, t.Context(), http.MethodConnect, url, "")
	req.Header[":protocol"] = []string{"websocket"}
	req.Header.Set("Sec-WebSocket-Version", "13")
	return req
}

// TestExtendedConnectH2: an extended CONNECT goes out over HTTP/2 with
// its :protocol, to a server that enabled it; refused with REFUSED_STREAM,
// the resend carries :protocol too: the server received the CONNECT
// twice, each with its :protocol and header fields.
func TestExtendedConnectH2(t *testing.T) {
	cfg := h2Script([]h2server.Action{h2server.Refuse()})
	cfg.TLS = true
	cfg.Settings = []http2.Setting{{ID: http2.SettingEnableConnectProtocol, Val: 1}}
	s := startH2(t, cfg)
	tr, obs := h2Client(t, s, replaysafe.Options{})
	code, body, err := roundTrip(tr, extendedConnect(t, s.URL()+"/chat"))
	if err != nil || code != 200 || body != "ok" {
		t.Fatalf("%d %q %v", code, body, err)
	}
	cs := h2Copies(s, "/chat")
	if len(cs) != 2 {
		t.Fatalf("%d copies", len(cs))
	}
	for _, c := range cs {
		if c.Method != http.MethodConnect || c.Protocol != "websocket" || c.Header.Get("Sec-Websocket-Version") != "13" {
			t.Errorf("copy %+v", c)
		}
	}
	wantDecisions(t, obs, "/chat", fsm.RuleEvidenceRefusedStream, fsm.RuleDeliverFinalResponse)
}

// TestExtendedConnectH3: over HTTP/3 the :protocol travels too (quic-go
// takes it from Request.Proto).
func TestExtendedConnectH3(t *testing.T) {
	s := startH3(t, h3server.Config{Settings: []h3server.Setting{{ID: 0x8, Value: 1}}}) // SETTINGS_ENABLE_CONNECT_PROTOCOL
	tr, _ := h3Client(t, s, replaysafe.Options{})
	code, body, err := roundTrip(tr, extendedConnect(t, s.URL()+"/chat"))
	if err != nil || code != 200 || body != "ok" {
		t.Fatalf("%d %q %v", code, body, err)
	}
	cs := wantH3Copies(t, s, "/chat", 0)
	if cs[0].Method != http.MethodConnect || cs[0].Protocol != "websocket" {
		t.Errorf("copy %+v", cs[0])
	}
}

// TestExtendedConnectRefusedOnHTTP1: an extended CONNECT under a plan
// with HTTP/1.1 only is refused before any connection; a :protocol on
// another method is an invalid header field name.
func TestExtendedConnectRefusedOnHTTP1(t *testing.T) {
	tr := replaysafe.New(replaysafe.Options{Protocol: replaysafe.ProtocolHTTP1})
	_, err := tr.RoundTrip(extendedConnect(t, "https://127.0.0.1:1/chat"))
	if !errors.Is(err, plan.ErrExtendedConnectH1) {
		t.Errorf("err %v, want the plan's refusal", err)
	}
	req := newRequest(t, t.Context(), http.MethodGet, "https://127.0.0.1:1/", "")
	req.Header[":protocol"] = []string{"websocket"}
	if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "invalid header field name") {
		t.Errorf("err %v, want an invalid header field name", err)
	}
}
