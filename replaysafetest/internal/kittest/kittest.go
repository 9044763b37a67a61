// Package kittest holds the test helpers the scripted servers' tests
// share.
package kittest

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// Context returns a context that ends after 10 s or with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Start runs a server made by start from cfg for the test, logging
// through t unless cfg already logs (setLogf), and closes it at the end.
func Start[C any, S interface{ Close() error }](t testing.TB, start func(C) (S, error), cfg C, logs func(*C) *func(string, ...any)) S {
	t.Helper()
	if l := logs(&cfg); *l == nil {
		*l = t.Logf
	}
	s, err := start(cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Starter returns a package's start helper: Start with its server's
// constructor and Logf field.
func Starter[C any, S interface{ Close() error }](start func(C) (S, error), logs func(*C) *func(string, ...any)) func(testing.TB, C) S {
	return func(t testing.TB, cfg C) S {
		t.Helper()
		return Start(t, start, cfg, logs)
	}
}

// IsReset reports whether err is the other side closing with an RST.
func IsReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// Returns runs f and fails the test when f has not returned after a
// minute, naming what. It checks that a call does not wait for
// something that never ends on its own (a test makes its hanging
// connections last an hour), not how fast the call is: a call that
// returns at all has passed.
func Returns(t testing.TB, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not return", what)
	}
}
