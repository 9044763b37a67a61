package otel_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/replaysafe/replaysafe"
	rsotel "github.com/replaysafe/replaysafe/otel"
)

// Instrument a Transport: its calls and wire attempts become spans (here
// in an in-memory recorder; in a program, a TracerProvider with an
// exporter) and its resends and retries metrics.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	in, err := rsotel.New(rsotel.Options{TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	tr := replaysafe.New(replaysafe.Options{Observer: in.Observer(replaysafe.Observer{})})
	defer tr.CloseIdleConnections()

	resp, err := (&http.Client{Transport: tr}).Get(srv.URL + "/hello")
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close() // the call's span ends with its body

	for _, s := range spans.Ended() {
		fmt.Printf("%s (%s)", s.Name(), s.SpanKind())
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "replaysafe.attempt", "replaysafe.rule", "http.response.status_code", "network.protocol.version":
				fmt.Printf(" %s=%s", kv.Key, kv.Value.String())
			}
		}
		fmt.Println()
	}
	// Output:
	// GET (client) network.protocol.version=1.1 replaysafe.attempt=original replaysafe.rule=RS02 http.response.status_code=200
	// replaysafe GET (internal) http.response.status_code=200 replaysafe.rule=RS02
}
