package replaysafe

import "github.com/replaysafe/replaysafe/transports"

// Transport is the HTTP/1.1 round tripper; see transports.Transport.
type Transport = transports.Transport

// Options configures a Transport; the zero value is ready to use. See
// transports.Options for every field and its default.
type Options = transports.Options

// Observer receives every call's request, wire attempts and final
// response or error; see transports.Observer.
type Observer = transports.Observer

// AttemptReport describes one finished wire attempt; see
// transports.AttemptReport.
type AttemptReport = transports.AttemptReport

// Error is the error of a call replaysafe gave up on: the rule that
// decided, the attempt count and the cause; see transports.Error.
type Error = transports.Error

// TimeoutError is the cause of a failure decided because a phase limit
// of Options passed; see transports.TimeoutError.
type TimeoutError = transports.TimeoutError

// New returns a Transport configured by o.
func New(o Options) *Transport { return transports.New(o) }
