package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/forward"
)

func init() {
	extraCommands = append(extraCommands, command{"forward", "forward every request to one upstream: a reverse proxy sidecar on replaysafe", runForward})
}

// runForward runs `replaysafe forward` until SIGINT or SIGTERM.
func runForward(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveForward(ctx, args, stderr, nil)
}

// defaultShutdownTimeout bounds the graceful shutdown of `replaysafe
// forward` once it is told to stop, unless -shutdown-timeout says
// otherwise.
const defaultShutdownTimeout = 10 * time.Second

// forwardUsage is the text of forward -h before the flags.
const forwardUsage = `usage: replaysafe forward -to URL [-listen ADDR] [-tls-cert F -tls-key F] [-h2c] [-h3]
       [-egress h1|h2|h3|negotiate] [-x-forwarded-for=false] [-forwarded] [-preserve-host]
       [-trust-forwarded] [-shutdown-timeout D] [-metrics ADDR]

Forwards every request to the upstream and logs one line per request to stderr. Its first
line names the listeners, what they accept and the egress. On SIGINT or SIGTERM it stops
accepting, lets the requests in flight finish for up to -shutdown-timeout, logs how many
did, and exits (1 when some were cut). With -metrics it serves the egress Transport's
attempts, resends, retries and connections at http://ADDR/metrics (Prometheus text format).
See docs/forwarding.md and docs/observability.md.

flags:
`

// serveForward parses args, listens and forwards until ctx is done, then
// drains the requests in flight. ready, if set, is called with the
// listening address once requests are served.
func serveForward(ctx context.Context, args []string, stderr io.Writer, ready func(addr string)) int {
	fs := flag.NewFlagSet("forward", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":8080", "address to listen on")
	to := fs.String("to", "", "upstream URL (http or https), required")
	cert := fs.String("tls-cert", "", "serve TLS (HTTP/1.1 and HTTP/2 by ALPN) with this PEM certificate file")
	key := fs.String("tls-key", "", "the PEM private key file of -tls-cert")
	h2c := fs.Bool("h2c", false, "also accept cleartext HTTP/2 with prior knowledge")
	h3 := fs.Bool("h3", false, "also serve HTTP/3 on the same port over UDP (needs -tls-cert)")
	egressName := fs.String("egress", "h1", "upstream protocol: h1, h2, h3 or negotiate")
	acquire := fs.Duration("acquire-timeout", replaysafe.DefaultAcquireTimeout, "deadline for getting an upstream connection (504 when it passes)")
	xff := fs.Bool("x-forwarded-for", true, "append the client address to X-Forwarded-For and set X-Forwarded-Host and X-Forwarded-Proto, as httputil.ReverseProxy does")
	forwarded := fs.Bool("forwarded", false, "append a Forwarded element (RFC 7239) naming the client, the inbound host and protocol")
	preserveHost := fs.Bool("preserve-host", false, "send the inbound Host upstream instead of the upstream's")
	trust := fs.Bool("trust-forwarded", false, "keep the inbound Forwarded and X-Forwarded-* fields and append to them (by default they are removed: any client can write them)")
	shutdownTimeout := fs.Duration("shutdown-timeout", defaultShutdownTimeout, "on SIGINT or SIGTERM, how long the requests in flight may take to finish")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics of the egress (resends, retries, connections) at http://ADDR/metrics")
	fs.Usage = func() {
		fmt.Fprint(stderr, forwardUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "replaysafe forward: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	up, err := url.Parse(*to)
	if *to == "" || err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return fail("-to needs an http or https URL with a host, got %q", *to)
	}
	egress, err := forward.ParseEgress(*egressName)
	if err != nil {
		return fail("%v", err)
	}
	if egress == forward.EgressHTTP3 && up.Scheme != "https" {
		return fail("-egress h3 needs an https upstream")
	}
	if (*cert == "") != (*key == "") {
		return fail("-tls-cert and -tls-key go together")
	}
	if *h3 && *cert == "" {
		return fail("-h3 needs -tls-cert and -tls-key")
	}
	if *shutdownTimeout < 0 {
		return fail("-shutdown-timeout must not be negative")
	}

	logger := slog.New(slog.NewTextHandler(stderr, nil))
	topts := replaysafe.Options{AcquireTimeout: *acquire}
	var metrics *egressMetrics
	var metricsLn net.Listener
	if *metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", *metricsAddr); err != nil {
			return fail("-metrics: %v", err)
		}
		defer metricsLn.Close()
		metrics = newEgressMetrics()
		topts.Observer = metrics.observer(topts.Observer)
	}
	fw := forward.New(forward.Options{
		Upstream:         up,
		Egress:           egress,
		TransportOptions: topts,
		XForwardedFor:    *xff,
		Forwarded:        *forwarded,
		PreserveHost:     *preserveHost,
		TrustForwarded:   *trust,
		Logger:           logger,
	})
	defer fw.Transport().CloseIdleConnections()
	if metrics != nil {
		msrv := serveMetrics(metricsLn, metrics, fw.Transport().IdleConns)
		defer msrv.Close()
	}
	var inFlight atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		fw.ServeHTTP(w, r)
	})

	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	scheme, accepts := "http", []string{"HTTP/1.1"}
	if *cert != "" {
		pair, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			return fail("loading the TLS certificate: %v", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}}
		srv.Protocols.SetHTTP2(true)
		scheme, accepts = "https", []string{"HTTP/1.1", "HTTP/2 by ALPN"}
	}
	if *h2c {
		srv.Protocols.SetUnencryptedHTTP2(true)
		accepts = append(accepts, "h2c")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail("%v", err)
	}
	listeners := fmt.Sprintf("%s://%s (%s)", scheme, ln.Addr(), strings.Join(accepts, ", "))
	errc := make(chan error, 2)
	var h3srv *http3.Server
	if *h3 {
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err != nil {
			ln.Close()
			return fail("%v", err)
		}
		h3srv = &http3.Server{Handler: handler, TLSConfig: http3.ConfigureTLSConfig(srv.TLSConfig.Clone())}
		defer h3srv.Close()
		go func() { errc <- h3srv.Serve(pc) }()
		listeners += fmt.Sprintf(" and udp %s (HTTP/3)", pc.LocalAddr())
	}
	headers := []string{}
	for _, h := range []struct {
		on   bool
		name string
	}{{*xff, "X-Forwarded-For"}, {*forwarded, "Forwarded"}, {true, "Via"}} {
		if h.on {
			headers = append(headers, h.name)
		}
	}
	host := "the upstream's Host"
	if *preserveHost {
		host = "the inbound Host"
	}
	inbound := "inbound forwarding fields removed"
	if *trust {
		inbound = "inbound forwarding fields kept"
	}
	fmt.Fprintf(stderr, "replaysafe forward: listening on %s, forwarding to %s (egress %v; adds %s; %s; %s)\n",
		listeners, up, egress, strings.Join(headers, ", "), host, inbound)
	if metrics != nil {
		fmt.Fprintf(stderr, "replaysafe forward: metrics at http://%s/metrics\n", metricsLn.Addr())
	}
	go func() {
		if *cert != "" {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return fail("%v", err)
	case <-ctx.Done():
	}
	return drain(stderr, srv, h3srv, &inFlight, *shutdownTimeout)
}

// drain stops the servers accepting, waits up to timeout for the
// requests in flight and logs what became of them: 0 when every one
// finished, 1 when the timeout cut some.
func drain(stderr io.Writer, srv *http.Server, h3srv *http3.Server, inFlight *atomic.Int64, timeout time.Duration) int {
	start := time.Now()
	n := inFlight.Load()
	fmt.Fprintf(stderr, "replaysafe forward: shutting down: %d request(s) in flight, waiting up to %v for them\n", n, timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if h3srv != nil {
		err = errors.Join(err, h3srv.Shutdown(sctx))
	}
	if err != nil {
		fmt.Fprintf(stderr, "replaysafe forward: shutdown after %v: %v; %d request(s) cut\n",
			time.Since(start).Round(time.Millisecond), err, inFlight.Load())
		srv.Close()
		return 1
	}
	fmt.Fprintf(stderr, "replaysafe forward: stopped after %v, every request in flight finished\n", time.Since(start).Round(time.Millisecond))
	return 0
}
