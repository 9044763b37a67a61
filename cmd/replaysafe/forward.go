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

// forwardShutdownTimeout bounds the graceful shutdown of `replaysafe
// forward` once it is told to stop.
const forwardShutdownTimeout = 5 * time.Second

// serveForward parses args, listens and forwards until ctx is done. ready,
// if set, is called with the listening address once requests are served.
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
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: replaysafe forward -to URL [-listen ADDR] [-tls-cert F -tls-key F] [-h2c] [-h3] [-egress h1|h2|h3|negotiate]")
		fmt.Fprintln(stderr, "\nForwards every request to the upstream and logs one line per request to stderr.")
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

	logger := slog.New(slog.NewTextHandler(stderr, nil))
	fw := forward.New(forward.Options{
		Upstream:         up,
		Egress:           egress,
		TransportOptions: replaysafe.Options{AcquireTimeout: *acquire},
		Logger:           logger,
	})
	defer fw.Transport().CloseIdleConnections()

	srv := &http.Server{Handler: fw, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	scheme := "http"
	if *cert != "" {
		pair, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			return fail("loading the TLS certificate: %v", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}}
		srv.Protocols.SetHTTP2(true)
		scheme = "https"
	}
	if *h2c {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail("%v", err)
	}
	errc := make(chan error, 2)
	if *h3 {
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err != nil {
			ln.Close()
			return fail("%v", err)
		}
		h3srv := &http3.Server{Handler: fw, TLSConfig: http3.ConfigureTLSConfig(srv.TLSConfig.Clone())}
		defer h3srv.Close()
		go func() { errc <- h3srv.Serve(pc) }()
		fmt.Fprintf(stderr, "replaysafe forward: HTTP/3 on udp %s\n", pc.LocalAddr())
	}
	fmt.Fprintf(stderr, "replaysafe forward: listening on %s://%s, forwarding to %s (egress %v)\n", scheme, ln.Addr(), up, egress)
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
	sctx, cancel := context.WithTimeout(context.Background(), forwardShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "replaysafe forward: shutdown: %v\n", err)
		return 1
	}
	return 0
}
