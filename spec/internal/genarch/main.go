// Command genarch writes docs/architecture.md: one Mermaid picture of the
// packages and of the data flow of one call, drawn from the fixed tables
// below. Run it through go generate in package spec; CI fails when the
// file is stale. A package that moves or appears is a change to these
// tables.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
)

// group is a box of the picture: a layer of the repository.
type group struct {
	id, title string
}

// node is one package, or one part of the root package; short names a
// part of the root package in the step list.
type node struct {
	id, group, pkg, role, short string
}

// step is one arrow of the data flow of a call, in order.
type step struct {
	from, to, what string
}

// use is one dependency that is not part of a call: a test layer, a
// generator, a tool.
type use struct {
	from, to, what string
}

var groups = []group{
	{"root", "replaysafe, the face (public)"},
	{"products", "built on the face (public)"},
	{"pure", "pure decision logic (public; standard library only)"},
	{"public", "the rules as data (public)"},
	{"adapters", "adapters: what each stack observes, as fsm events (public)"},
	{"transports", "transports: connections and tunnels, usable alone (public)"},
	{"internal", "internal: what the face runs on"},
	{"harness", "internal/harness: tools that import the library"},
	{"checks", "the test kit (public), tests and tools"},
}

var nodes = []node{
	{"caller", "", "", "the caller: http.Client or any RoundTripper user", "the caller"},
	{"transport", "root", "replaysafe", "New, Options, Transport.RoundTrip (validate, run the call, one *Error), Retry, Observer, Protocol", "Transport"},
	{"forward", "products", "forward", "Forwarder: a streaming reverse proxy, an http.Handler forwarding through a Transport", ""},
	{"otel", "products", "otel", "OpenTelemetry spans and metrics of a Transport (a module of its own)", ""},
	{"plan", "pure", "fsm/plan", "dispatch plan: which protocols a call tries, in what order", ""},
	{"route", "pure", "fsm/route", "route snapshot and the one acquisition deadline", ""},
	{"fsm", "pure", "fsm", "the machine: request facts and events in, decision and rule out", ""},
	{"call", "pure", "fsm", "the call machine (fsm.Call): each attempt's outcome in; deliver, fail, resend, or retry after a wait", "fsm.Call"},
	{"spec", "public", "spec", "the rules as data, example traces, the doc generators", ""},
	{"h1", "adapters", "adapters/h1", "net/http client connection", ""},
	{"h2", "adapters", "adapters/h2", "transports/h2's stream evidence and typed errors", ""},
	{"h3", "adapters", "adapters/h3", "quic-go/http3", ""},
	{"recorder", "adapters", "adapters/recorder", "feeds an attempt's events to its machine, keeps the trace, arms the deadline", ""},
	{"netclass", "adapters", "adapters/netclass", "the shared error classifier: the same errno is the same event on every stack", ""},
	{"informational", "adapters", "adapters/informational", "the bound on 1xx responses one attempt accepts", ""},
	{"h2conn", "transports", "transports/h2", "HTTP/2 client connection on x/net's Framer and hpack: protocol state as a value, evidence first-hand", ""},
	{"proxy", "transports", "transports/proxy", "CONNECT and SOCKS5 hops, NO_PROXY, absolute-form forwarding", ""},
	{"driver", "internal", "internal/driver", "the call driver: one attempt loop for every protocol, feeding the machines and acting on their decisions", ""},
	{"pool", "internal", "internal/pool", "bounded pools: HTTP/1.1 idle connections, multiplexed HTTP/2 and HTTP/3 connections, the per-route limit", ""},
	{"dial", "internal", "internal/dial", "route resolution (proxies, credentials) and connection establishment under one deadline", ""},
	{"altsvc", "internal", "internal/altsvc", "Alt-Svc cache for HTTP/3", ""},
	{"conformance", "harness", "internal/harness/conformance", "fault scenarios counted at the server", ""},
	{"tracecheck", "harness", "internal/harness/tracecheck", "replays observed attempt traces through fsm and the model", ""},
	{"soak", "harness", "internal/harness/soak", "many concurrent calls against a faulty server: hard bounds, dials, copies", ""},
	{"bench", "harness", "internal/harness/bench", "benchmarks beside net/http, x/net and quic-go in one run", ""},
	{"interop", "harness", "internal/harness/interop", "rows against real nginx, haproxy and caddy", ""},
	{"retrycmp", "harness", "internal/harness/retrycmp", "copies sent by the retry libraries users pick, counted at the server", ""},
	{"campaign", "harness", "internal/harness/campaign", "fuzz campaigns over the native fuzz targets", ""},
	{"rstest", "checks", "replaysafetest", "scripted servers that count what they receive: HTTP/1.1 over TCP and TLS", ""},
	{"h2server", "checks", "replaysafetest/h2server", "the scripted HTTP/2 origin", ""},
	{"h3server", "checks", "replaysafetest/h3server", "the scripted HTTP/3 origin", ""},
	{"connectproxy", "checks", "replaysafetest/connectproxy", "scripted CONNECT (HTTP/1.1 and HTTP/2) and SOCKS5 proxies", ""},
	{"h3early", "checks", "replaysafetest/h3early", "quic-go's HTTP/3 server allowing 0-RTT, recording which requests came in early data", ""},
	{"model", "checks", "model_test", "independent model of the rules", ""},
	{"fuzz", "checks", "fuzz", "native fuzz targets and seed corpora", ""},
	{"cmd", "checks", "cmd/replaysafe", "rules, explain, conformance, soak, forward, fuzz, bench", ""},
}

// listed are the packages the package table names but the picture
// leaves out: helpers of one layer, generators, modules of their own.
var listed = []struct{ pkg, role string }{
	{"spec/ruledata", "the normative rule list, imported by spec and by the generators"},
	{"spec/internal/genrules", "writes fsm's rule ID constants (fsm/rule_gen.go) from spec/ruledata"},
	{"spec/internal/gendocs", "writes docs/rules.md and docs/diagram.md from package spec"},
	{"spec/internal/genarch", "writes this file"},
	{"replaysafetest/internal/kit", "what the scripted servers share: records, waiters, lifetime, TLS"},
	{"replaysafetest/internal/kittest", "test helpers of the scripted servers' tests"},
	{"replaysafetest/udprelay", "a UDP relay that delays every datagram: a loopback with a real round trip"},
	{"internal/selfsigned", "in-memory certificates for the test servers and benchmarks"},
	{"internal/testservers/squid", "runs Debian's squid for a test, on loopback ports of its own"},
	{"tools/benchci", "benchmark statistics over a bench run (a module of its own)"},
}

// flow is the data flow of one call: face → driver → plan → acquire →
// attempt → machine → decision → call machine, and the resend or retry
// it decides.
var flow = []step{
	{"caller", "transport", "RoundTrip(req)"},
	{"transport", "driver", "the validated request and its retry policy"},
	{"driver", "plan", "scheme, route, what earlier calls learned"},
	{"plan", "pool", "dispatch plan: legs with protocol, pool policy, ALPN"},
	{"pool", "dial", "on a miss, one dial under the acquisition deadline"},
	{"dial", "proxy", "through the hops"},
	{"pool", "driver", "connection, reused or fresh"},
	{"driver", "h1", "run the attempt on the stack"},
	{"h1", "fsm", "events: Step(event)"},
	{"fsm", "driver", "decision: action, rule, connection verdict"},
	{"driver", "call", "outcome: the decision, a response's status and Retry-After, the route's retry budget"},
	{"call", "driver", "deliver, fail with the rule, resend at once, or retry after a wait on a new route snapshot"},
	{"driver", "transport", "the response, or the failure the face reports as *Error"},
}

var uses = []use{
	{"plan", "route", ""},
	{"dial", "route", "acquisition deadline"},
	{"forward", "transport", "forwards through"},
	{"h1", "recorder", ""},
	{"spec", "fsm", "generates the rule constants"},
	{"model", "fsm", "compares"},
	{"fuzz", "fsm", "fuzzes against the model"},
	{"tracecheck", "fsm", "replays"},
	{"conformance", "rstest", "scripted servers"},
	{"conformance", "transport", "counts copies"},
	{"cmd", "spec", "rules, explain"},
	{"cmd", "conformance", "conformance"},
	{"h2", "fsm", ""},
	{"h2", "h2conn", "stream events, errors"},
	{"driver", "h2conn", "HTTP/2 connections"},
	{"h3", "fsm", ""},
	{"driver", "altsvc", "HTTP/3 alternatives"},
	{"h1", "netclass", "errors as events"},
	{"h2", "netclass", ""},
	{"h3", "netclass", ""},
	{"h1", "informational", "1xx bound"},
	{"otel", "transport", "observes"},
	{"soak", "transport", "soaks"},
	{"bench", "transport", "times"},
	{"interop", "transport", "real servers"},
	{"retrycmp", "transport", "counts copies"},
	{"campaign", "fuzz", "runs"},
	{"conformance", "h2server", ""},
	{"conformance", "h3server", ""},
	{"conformance", "connectproxy", ""},
	{"conformance", "h3early", "0-RTT"},
	{"cmd", "soak", "soak"},
	{"cmd", "bench", "bench"},
	{"cmd", "campaign", "fuzz"},
	{"cmd", "forward", "forward"},
}

func main() {
	out := flag.String("o", "architecture.md", "output file")
	flag.Parse()
	src, err := render()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		log.Fatal(err)
	}
}

func render() ([]byte, error) {
	byID := map[string]node{}
	for _, n := range nodes {
		if _, dup := byID[n.id]; dup {
			return nil, fmt.Errorf("node %s listed twice", n.id)
		}
		byID[n.id] = n
	}
	for _, e := range append(stepsAsUses(), uses...) {
		if _, ok := byID[e.from]; !ok {
			return nil, fmt.Errorf("edge from unknown node %s", e.from)
		}
		if _, ok := byID[e.to]; !ok {
			return nil, fmt.Errorf("edge to unknown node %s", e.to)
		}
	}
	var b bytes.Buffer
	b.WriteString("<!-- Code generated by spec/internal/genarch; DO NOT EDIT. -->\n\n")
	b.WriteString("# Architecture\n\n")
	b.WriteString("The packages, and what one call goes through. Numbered solid arrows are\n")
	b.WriteString("the data flow of one call (plan, acquire, attempt, machine, decision, call machine);\n")
	b.WriteString("dotted arrows are the packages that check, generate or drive the others.\n")
	var viaH1 []string
	for i, s := range flow {
		if s.from == "h1" || s.to == "h1" {
			viaH1 = append(viaH1, fmt.Sprint(i+1))
		}
	}
	fmt.Fprintf(&b, "The adapters for HTTP/2 and HTTP/3 take the place of `h1` in steps %s for\n", strings.Join(viaH1, " and "))
	b.WriteString("those protocols. The tables behind the picture are in\n")
	b.WriteString("`spec/internal/genarch`.\n\n")
	b.WriteString("```mermaid\nflowchart TB\n")
	fmt.Fprintf(&b, "    %s([%q])\n", "caller", byID["caller"].role)
	for _, g := range groups {
		fmt.Fprintf(&b, "    subgraph %s[%q]\n", g.id, g.title)
		for _, n := range nodes {
			if n.group != g.id {
				continue
			}
			label := n.role
			if n.pkg != "" && n.group != "root" {
				label = n.pkg + ": " + n.role
			}
			fmt.Fprintf(&b, "        %s[%q]\n", n.id, label)
		}
		b.WriteString("    end\n")
	}
	for i, s := range flow {
		fmt.Fprintf(&b, "    %s -->|%q| %s\n", s.from, fmt.Sprintf("%d %s", i+1, s.what), s.to)
	}
	for _, u := range uses {
		if u.what == "" {
			fmt.Fprintf(&b, "    %s -.-> %s\n", u.from, u.to)
			continue
		}
		fmt.Fprintf(&b, "    %s -.->|%q| %s\n", u.from, u.what, u.to)
	}
	b.WriteString("```\n\n")
	b.WriteString("## One call, step by step\n\n")
	for i, s := range flow {
		fmt.Fprintf(&b, "%d. %s → %s: %s.\n", i+1, name(byID[s.from]), name(byID[s.to]), s.what)
	}
	b.WriteString("\n## Packages\n\n| package | what it holds |\n|---|---|\n")
	seen := map[string]bool{}
	for _, n := range nodes {
		if n.pkg == "" {
			continue
		}
		if seen[n.pkg] {
			continue
		}
		seen[n.pkg] = true
		role := n.role
		if n.group == "root" {
			var parts []string
			for _, m := range nodes {
				if m.group == "root" {
					parts = append(parts, m.role)
				}
			}
			role = strings.Join(parts, "; ")
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", n.pkg, role)
	}
	for _, l := range listed {
		if seen[l.pkg] {
			return nil, fmt.Errorf("package %s listed twice", l.pkg)
		}
		seen[l.pkg] = true
		fmt.Fprintf(&b, "| `%s` | %s |\n", l.pkg, l.role)
	}
	return b.Bytes(), nil
}

func name(n node) string {
	switch {
	case n.pkg == "":
		return n.short
	case n.group == "root" || n.short != "":
		return "`" + n.pkg + "` (" + n.short + ")"
	}
	return "`" + n.pkg + "`"
}

func stepsAsUses() []use {
	out := make([]use, len(flow))
	for i, s := range flow {
		out[i] = use(s)
	}
	return out
}
