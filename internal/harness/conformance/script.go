package conformance

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/replaysafe/replaysafe/replaysafetest"
	"github.com/replaysafe/replaysafe/replaysafetest/h2server"
	"github.com/replaysafe/replaysafe/replaysafetest/h3server"
)

// The action names a scenario's conn and default lines may use, per
// protocol. HTTP/1.1 actions close the way the network says.
var (
	h1Actions = map[string]func(mode replaysafetest.CloseMode, signal <-chan struct{}) replaysafetest.Action{
		"ok": func(replaysafetest.CloseMode, <-chan struct{}) replaysafetest.Action { return replaysafetest.OK() },
		"crossing": func(m replaysafetest.CloseMode, _ <-chan struct{}) replaysafetest.Action {
			return replaysafetest.RespondThenCloseOnNext(m)
		},
		"drop": func(m replaysafetest.CloseMode, _ <-chan struct{}) replaysafetest.Action {
			return replaysafetest.Drop(m)
		},
		"idle-close": func(m replaysafetest.CloseMode, sig <-chan struct{}) replaysafetest.Action {
			return replaysafetest.IdleCloseOn(sig, m)
		},
		"partial-status": func(m replaysafetest.CloseMode, _ <-chan struct{}) replaysafetest.Action {
			return replaysafetest.PartialStatus(m)
		},
		"malformed": func(m replaysafetest.CloseMode, _ <-chan struct{}) replaysafetest.Action {
			return replaysafetest.Malformed(m)
		},
		"interim-100": func(m replaysafetest.CloseMode, _ <-chan struct{}) replaysafetest.Action {
			return replaysafetest.Interim100(m)
		},
		"interim-103": func(m replaysafetest.CloseMode, _ <-chan struct{}) replaysafetest.Action {
			return replaysafetest.EarlyHints(m)
		},
		"endless-103": func(m replaysafetest.CloseMode, _ <-chan struct{}) replaysafetest.Action {
			return replaysafetest.EndlessInterim(http.StatusEarlyHints, m)
		},
		"hang": func(replaysafetest.CloseMode, <-chan struct{}) replaysafetest.Action { return replaysafetest.Hang(0) },
	}
	h2Actions = map[string]h2server.Action{
		"ok":                h2server.OK("ok"),
		"refuse":            h2server.Refuse(),
		"refuse-after-body": h2server.RefuseAfterBody(),
		"goaway-below":      h2server.GoAwayBelow(),
		"goaway-at+close":   h2server.GoAwayAt().WithClose(h2server.CloseFIN),
		"endless-103":       h2server.Endless1xx(http.StatusEarlyHints),
	}
	h3Actions = map[string]h3server.Action{
		"ok":                     h3server.OK("ok"),
		"reject":                 h3server.Reject(),
		"reject-after-body":      h3server.RejectAfterBody(),
		"goaway-rejecting+close": h3server.GoAwayRejecting().WithClose(),
		"goaway-8+close":         h3server.GoAway(8).WithClose(),
		"close-after-body":       h3server.CloseConnAfterBody(),
		"reset-internal":         h3server.Reset(http3.ErrCodeInternalError),
		"endless-103":            h3server.Endless1xx(http.StatusEarlyHints),
	}
)

// serverSpec is the configuration of one run's origin: exactly one field
// is set.
type serverSpec struct {
	h1    *replaysafetest.Config
	h2    *h2server.Config
	h3    *h3server.Config
	early *earlySpec
}

// earlySpec is an HTTP/3 origin that allows early data (h3early): server
// line "early", "early-reject" (new connections resume but refuse early
// data) or "early-425" (a request in early data is answered 425).
type earlySpec struct {
	reject, tooEarly bool
}

// informational splits a "103:refuse" action name into its interim
// status (0 without) and the action's name.
func informational(name string) (int, string, error) {
	code, rest, ok := strings.Cut(name, ":")
	if !ok {
		return 0, name, nil
	}
	n, err := strconv.Atoi(code)
	if err != nil || n < 100 || n > 199 {
		return 0, "", fmt.Errorf("action %q: %q is not a 1xx status", name, code)
	}
	return n, rest, nil
}

// serverConfig builds the origin's configuration for network n; signal
// is the run's idle-close signal.
func (s *Scenario) serverConfig(n Network, signal <-chan struct{}) (serverSpec, error) {
	switch s.Proto {
	case ProtoH1:
		cfg := &replaysafetest.Config{TLS: n.TLS}
		for _, names := range s.Conns {
			var acts []replaysafetest.Action
			for _, name := range names {
				mk, ok := h1Actions[name]
				if !ok {
					return serverSpec{}, fmt.Errorf("unknown h1 action %q", name)
				}
				acts = append(acts, mk(n.Close, signal))
			}
			cfg.Conns = append(cfg.Conns, replaysafetest.Script(acts...))
		}
		if s.Default != "" || len(s.Server) > 0 {
			return serverSpec{}, fmt.Errorf("h1 scenarios take no default or server line")
		}
		return serverSpec{h1: cfg}, nil
	case ProtoH2:
		cfg := &h2server.Config{TLS: n.TLS}
		var err error
		cfg.Conns, cfg.Default, err = streamScripts(s, h2Actions, h2server.Action.WithInformational,
			func(a []h2server.Action) h2server.ConnScript { return h2server.ConnScript{Streams: a} }, h2server.Every)
		if err != nil {
			return serverSpec{}, err
		}
		for _, o := range s.Server {
			k, v, _ := strings.Cut(o, "=")
			switch k {
			case "refuse-body-before-ack":
				cfg.RefuseBodyBeforeSettingsAck = true
			case "initial-window":
				n, err := strconv.ParseUint(v, 10, 31)
				if err != nil {
					return serverSpec{}, fmt.Errorf("server %q: want initial-window=N", o)
				}
				cfg.Settings = append(cfg.Settings, http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(n)})
			case "max-requests":
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 {
					return serverSpec{}, fmt.Errorf("server %q: want max-requests=N", o)
				}
				cfg.MaxRequestsPerConn = n
			default:
				return serverSpec{}, fmt.Errorf("unknown h2 server option %q", o)
			}
		}
		return serverSpec{h2: cfg}, nil
	case ProtoH3:
		if len(s.Server) == 1 && strings.HasPrefix(s.Server[0], "early") {
			if len(s.Conns) > 0 || s.Default != "" {
				return serverSpec{}, fmt.Errorf("an early-data origin takes no conn or default line")
			}
			switch s.Server[0] {
			case "early":
				return serverSpec{early: &earlySpec{}}, nil
			case "early-reject":
				return serverSpec{early: &earlySpec{reject: true}}, nil
			case "early-425":
				return serverSpec{early: &earlySpec{tooEarly: true}}, nil
			}
			return serverSpec{}, fmt.Errorf("unknown h3 server option %q", s.Server[0])
		}
		cfg := &h3server.Config{}
		var err error
		cfg.Conns, cfg.Default, err = streamScripts(s, h3Actions, h3server.Action.WithInformational,
			func(a []h3server.Action) h3server.ConnScript { return h3server.ConnScript{Streams: a} }, h3server.Every)
		if err != nil {
			return serverSpec{}, err
		}
		if len(s.Server) > 0 {
			return serverSpec{}, fmt.Errorf("h3 scenarios take no server line but early, early-reject or early-425")
		}
		return serverSpec{h3: cfg}, nil
	}
	return serverSpec{}, fmt.Errorf("proto %q", s.Proto)
}

// streamScripts resolves the conn and default lines of an HTTP/2 or
// HTTP/3 scenario through table into connection scripts (made by script)
// and the default script (made by every; nil without a default line); a
// "103:" prefix adds an interim response with with1xx.
func streamScripts[A, C any](s *Scenario, table map[string]A, with1xx func(A, int, http.Header) A,
	script func([]A) C, every func(A) *C) (conns []C, def *C, err error) {
	action := func(name string) (A, error) {
		var zero A
		code, base, err := informational(name)
		if err != nil {
			return zero, err
		}
		a, ok := table[base]
		if !ok {
			return zero, fmt.Errorf("unknown %s action %q", s.Proto, name)
		}
		if code != 0 {
			a = with1xx(a, code, nil)
		}
		return a, nil
	}
	for _, names := range s.Conns {
		var acts []A
		for _, name := range names {
			a, err := action(name)
			if err != nil {
				return nil, nil, err
			}
			acts = append(acts, a)
		}
		conns = append(conns, script(acts))
	}
	if s.Default != "" {
		a, err := action(s.Default)
		if err != nil {
			return nil, nil, err
		}
		def = every(a)
	}
	return conns, def, nil
}
