package conformance

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// A step is one client action of a scenario. A step that sends the
// counted request returns its result; the others return nil. An error is
// a harness failure (a setup error), not an outcome.
type step func(env *Env, args []string) (*Result, error)

// steps are the step names a scenario's step lines may use:
//
//	warm                       GET /warm, read to the end: a kept-alive connection
//	prime                      GET /prime, then close it: the next connection resumes its session (server early)
//	hold-two-stale             two kept-alive connections, both scripted to close on their next request
//	idle-close-seen            the server closes connection 0 (idle-close) and the client notices
//	idle-close-in-flight       the server closes connection 0 while the close is still on its way
//	target METHOD BODY [K=V]   the counted request (BODY: none, buffered, oneshot; K=V header fields)
//	expire METHOD              the target, its deadline passing once the server has it (HTTP/1.1)
//	cancel METHOD              the target, canceled once the server has it (HTTP/1.1)
//	burst N METHOD             N targets at once, each its own request (TargetPath?id=i)
var steps = map[string]step{
	"warm":  func(env *Env, _ []string) (*Result, error) { return nil, env.Warm("/warm") },
	"prime": func(env *Env, _ []string) (*Result, error) { return nil, env.Prime() },
	"hold-two-stale": func(env *Env, _ []string) (*Result, error) {
		return nil, env.twoStale()
	},
	"idle-close-seen": func(env *Env, _ []string) (*Result, error) {
		if env.h1 == nil {
			return nil, errors.New("conformance: idle-close-seen needs HTTP/1.1")
		}
		return nil, env.IdleCloseSeen()
	},
	"idle-close-in-flight": func(env *Env, _ []string) (*Result, error) {
		if env.h1 == nil {
			return nil, errors.New("conformance: idle-close-in-flight needs HTTP/1.1")
		}
		return nil, env.IdleCloseInFlight()
	},
	"target": func(env *Env, args []string) (*Result, error) {
		if len(args) < 2 {
			return nil, errors.New("conformance: target METHOD BODY [K=V...]")
		}
		body, err := parseBody(args[1])
		if err != nil {
			return nil, err
		}
		var header []string
		for _, kv := range args[2:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("conformance: header %q: want K=V", kv)
			}
			header = append(header, k, v)
		}
		r := env.Target(args[0], body, header...)
		return &r, nil
	},
	"expire": func(env *Env, args []string) (*Result, error) {
		if env.h1 == nil || len(args) != 1 {
			return nil, errors.New("conformance: expire METHOD, over HTTP/1.1")
		}
		r := env.Expire(args[0], NoBody)
		return &r, nil
	},
	"cancel": func(env *Env, args []string) (*Result, error) {
		if env.h1 == nil || len(args) != 1 {
			return nil, errors.New("conformance: cancel METHOD, over HTTP/1.1")
		}
		r := env.Cancel(args[0], NoBody)
		return &r, nil
	},
	"burst": func(env *Env, args []string) (*Result, error) {
		if len(args) != 2 {
			return nil, errors.New("conformance: burst N METHOD")
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("conformance: burst %q: want 1 to 1024", args[0])
		}
		r := env.burst(n, args[1])
		return &r, nil
	},
}

// burst sends n targets at once, each to its own path, and returns 200
// when all of them got one, else the first failure.
func (e *Env) burst(n int, method string) Result {
	ctx, cancel := e.targetCtx()
	defer cancel()
	results := make([]Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i] = e.TargetContext(ctx, TargetPath+"?id="+strconv.Itoa(i), method, NoBody)
		})
	}
	wg.Wait()
	for _, r := range results {
		if r.Err != nil || r.Status != http.StatusOK {
			return r
		}
	}
	return Result{Status: http.StatusOK}
}

// twoStale leaves two kept-alive connections in the client's pool, both
// scripted to close when their next request arrives.
func (e *Env) twoStale() error {
	a, err := e.Hold("/a")
	if err != nil {
		return err
	}
	b, err := e.Hold("/b")
	if err != nil {
		a.Body.Close()
		return err
	}
	errA, errB := finish(a), finish(b)
	return errors.Join(errA, errB)
}

// runSteps runs the scenario's steps in order and returns the result of
// the last one that sent the target.
func (e *Env) runSteps(list [][]string) (Result, error) {
	var res Result
	for _, st := range list {
		r, err := steps[st[0]](e, st[1:])
		if err != nil {
			return Result{}, err
		}
		if r != nil {
			res = *r
		}
	}
	return res, nil
}
