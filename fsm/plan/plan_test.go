package plan_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/fsm/plan"
)

// legs renders a plan as "h3(h3,race)->no-conn->h2(negotiate)->alpn-h1->h1(negotiate)".
func legs(p plan.Plan) string {
	if p.Err != nil {
		return "refused: " + p.Err.Error()
	}
	var b strings.Builder
	for i, l := range p.Legs {
		if i > 0 {
			fmt.Fprintf(&b, "->%s->", p.Legs[i-1].Next)
		}
		fmt.Fprintf(&b, "%s(%s", l.Proto, l.Route)
		if l.Race {
			b.WriteString(",race")
		}
		if len(l.ALPN) > 0 {
			fmt.Fprintf(&b, ",alpn=%s", strings.Join(l.ALPN, "+"))
		}
		b.WriteString(")")
	}
	return b.String()
}

func TestMake(t *testing.T) {
	const (
		h1tls   = "h1(h1,alpn=http/1.1)"
		h1clear = "h1(h1)"
		neg     = "h2(negotiate,alpn=h2+http/1.1)->alpn-h1->h1(negotiate,alpn=http/1.1)"
		negH1   = "h1(negotiate,alpn=http/1.1)"
		race    = "h3(h3,race,alpn=h3)->no-conn->"
	)
	for _, tc := range []struct {
		name string
		in   plan.Input
		want string
	}{
		{"http1 https", plan.Input{Policy: plan.HTTP1, HTTPS: true}, h1tls},
		{"http1 http proxied", plan.Input{Policy: plan.HTTP1, Proxied: true}, h1clear},
		{"http2 https", plan.Input{Policy: plan.HTTP2, HTTPS: true}, "h2(h2,alpn=h2)"},
		{"http2 h2c", plan.Input{Policy: plan.HTTP2}, "h2(h2)"},
		{"http2 https proxied", plan.Input{Policy: plan.HTTP2, HTTPS: true, Proxied: true}, "h2(h2,alpn=h2)"},
		{"http2 h2c proxied", plan.Input{Policy: plan.HTTP2, Proxied: true}, "refused: " + plan.ErrH2CProxied.Error()},
		{"negotiate https", plan.Input{Policy: plan.Negotiate, HTTPS: true}, neg},
		{"negotiate https, ALPN chose h1 before", plan.Input{Policy: plan.Negotiate, HTTPS: true, ALPNChoseH1: true}, negH1},
		{"negotiate http", plan.Input{Policy: plan.Negotiate}, h1clear},
		{"http3", plan.Input{Policy: plan.HTTP3, HTTPS: true}, "h3(h3,alpn=h3)"},
		{"http3 ignores a broken route", plan.Input{Policy: plan.HTTP3, HTTPS: true, H3Broken: true}, "h3(h3,alpn=h3)"},
		{"http3 http", plan.Input{Policy: plan.HTTP3}, "refused: " + plan.ErrH3Scheme.Error()},
		{"http3 proxied", plan.Input{Policy: plan.HTTP3, HTTPS: true, Proxied: true}, "refused: " + plan.ErrH3Proxied.Error()},
		{"prefer https", plan.Input{Policy: plan.PreferHTTP3, HTTPS: true}, race + neg},
		{"prefer https, ALPN chose h1", plan.Input{Policy: plan.PreferHTTP3, HTTPS: true, ALPNChoseH1: true}, race + negH1},
		{"prefer https broken", plan.Input{Policy: plan.PreferHTTP3, HTTPS: true, H3Broken: true}, neg},
		{"prefer https proxied", plan.Input{Policy: plan.PreferHTTP3, HTTPS: true, Proxied: true}, neg},
		{"prefer http", plan.Input{Policy: plan.PreferHTTP3}, h1clear},
		{"discover without advertisement", plan.Input{Policy: plan.DiscoverHTTP3, HTTPS: true}, neg},
		{"discover advertised", plan.Input{Policy: plan.DiscoverHTTP3, HTTPS: true, AltSvcH3: true}, race + neg},
		{"discover advertised but broken", plan.Input{Policy: plan.DiscoverHTTP3, HTTPS: true, AltSvcH3: true, H3Broken: true}, neg},
		{"discover advertised, proxied", plan.Input{Policy: plan.DiscoverHTTP3, HTTPS: true, AltSvcH3: true, Proxied: true}, neg},
		{"extended CONNECT, http1", plan.Input{Policy: plan.HTTP1, HTTPS: true, ExtendedConnect: true}, "refused: " + plan.ErrExtendedConnectH1.Error()},
		{"extended CONNECT, negotiate", plan.Input{Policy: plan.Negotiate, HTTPS: true, ExtendedConnect: true}, "h2(negotiate,alpn=h2+http/1.1)"},
		{"extended CONNECT, negotiate, ALPN chose h1", plan.Input{Policy: plan.Negotiate, HTTPS: true, ALPNChoseH1: true, ExtendedConnect: true}, "refused: " + plan.ErrExtendedConnectH1.Error()},
		{"extended CONNECT, negotiate http", plan.Input{Policy: plan.Negotiate, ExtendedConnect: true}, "refused: " + plan.ErrExtendedConnectH1.Error()},
		{"extended CONNECT, h2c", plan.Input{Policy: plan.HTTP2, ExtendedConnect: true}, "h2(h2)"},
		{"extended CONNECT, prefer", plan.Input{Policy: plan.PreferHTTP3, HTTPS: true, ExtendedConnect: true}, race + "h2(negotiate,alpn=h2+http/1.1)"},
		{"extended CONNECT, http3", plan.Input{Policy: plan.HTTP3, HTTPS: true, ExtendedConnect: true}, "h3(h3,alpn=h3)"},
	} {
		if got := legs(plan.Make(tc.in)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	if p := plan.Make(plan.Input{Policy: 200}); !errors.Is(p.Err, plan.ErrPolicy) || p.First().Proto != 0 {
		t.Errorf("unknown policy: %+v", p)
	}
}

// TestInvariants walks every input: a plan has legs or an error, never
// both; only the last leg never hands over; an HTTP/3 leg comes first and
// only for https on a direct route; a hand-over from HTTP/3 is on a
// missing connection and from HTTP/2 on ALPN, which only TLS has; an
// HTTP/1.1 leg offers only http/1.1.
func TestInvariants(t *testing.T) {
	n := 0
	for pol := plan.Negotiate; pol <= plan.DiscoverHTTP3; pol++ {
		for bits := range 1 << 6 {
			in := plan.Input{Policy: pol, HTTPS: bits&1 != 0, Proxied: bits&2 != 0,
				ALPNChoseH1: bits&4 != 0, H3Broken: bits&8 != 0, AltSvcH3: bits&16 != 0, ExtendedConnect: bits&32 != 0}
			p := plan.Make(in)
			n++
			if (p.Err == nil) == (len(p.Legs) == 0) {
				t.Fatalf("%+v: %s", in, legs(p))
			}
			for i, l := range p.Legs {
				last := i == len(p.Legs)-1
				if last != (l.Next == plan.FallbackNever) {
					t.Errorf("%+v: leg %d hands over %v", in, i, l.Next)
				}
				switch l.Proto {
				case fsm.ProtoH3:
					if i != 0 || !in.HTTPS || in.Proxied || l.Next == plan.FallbackALPN {
						t.Errorf("%+v: %s", in, legs(p))
					}
				case fsm.ProtoH2:
					if l.Next == plan.FallbackALPN && !in.HTTPS || l.Next == plan.FallbackNoConn {
						t.Errorf("%+v: %s", in, legs(p))
					}
				case fsm.ProtoH1:
					if in.ExtendedConnect || in.HTTPS != (len(l.ALPN) == 1 && l.ALPN[0] == "http/1.1") {
						t.Errorf("%+v: %s", in, legs(p))
					}
				}
			}
		}
	}
	if n != 6*64 {
		t.Fatalf("walked %d inputs", n)
	}
}

// TestMakeDoesNotAllocate: a plan per call costs nothing.
func TestMakeDoesNotAllocate(t *testing.T) {
	in := plan.Input{Policy: plan.PreferHTTP3, HTTPS: true}
	if n := testing.AllocsPerRun(100, func() { _ = plan.Make(in) }); n != 0 {
		t.Errorf("%v allocations per Make", n)
	}
}
