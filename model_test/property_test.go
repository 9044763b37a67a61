package modeltest

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/replaysafe/replaysafe/fsm"
	"github.com/replaysafe/replaysafe/spec/ruledata"
	"pgregory.net/rapid"
)

var propertySeed = flag.Uint64("modeltest.seed", 1, "seed of the inputs of TestPropertyReachesEveryRule")

// TestMachineMatchesModel runs the state-machine property (property.go):
// random valid and invalid event orders, fsm compared with the model and
// the invariants checked after every action. rapid prints the seed of a
// failure (rerun with -rapid.seed=N); -rapid.checks and -rapid.steps make
// the run longer. It runs rapid.Check ten times, each with its own seed.
func TestMachineMatchesModel(t *testing.T) {
	stats := &propertyStats{diverged: map[string]int{}}
	rounds := 10
	if testing.Short() {
		rounds = 1
	}
	for range rounds {
		rapid.Check(t, func(t *rapid.T) { property(t, stats) })
	}
	t.Logf("%d events fed, %d second attempts, known divergences met: %v", stats.events, stats.secondAttempts, stats.diverged)
}

// callRule reports whether spec/ruledata marks r as a rule of fsm.Call
// rather than of the attempt machine.
func callRule(r fsm.Rule) bool {
	for _, d := range ruledata.Rules {
		if d.Number == int(r) {
			return d.Call
		}
	}
	return false
}

// TestPropertyReachesEveryRule shows that the property's generator gets
// everywhere: run on deterministic inputs (from -modeltest.seed), the way
// a fuzzer runs it, it makes fsm decide by every rule and starts second
// attempts. It checks the property on each input as well.
func TestPropertyReachesEveryRule(t *testing.T) {
	t.Logf("inputs from -modeltest.seed=%d", *propertySeed)
	rng := rand.New(rand.NewPCG(*propertySeed, 0x6d6f64656c))
	stats := &propertyStats{diverged: map[string]int{}}
	prop := rapid.MakeFuzz(func(t *rapid.T) { property(t, stats) })
	inputs := 400
	if testing.Short() {
		inputs = 40
	}
	skipped := 0
	for i := range inputs {
		input := make([]byte, 8*1024)
		for j := 0; j < len(input); j += 8 {
			binary.LittleEndian.PutUint64(input[j:], rng.Uint64())
		}
		ok := t.Run(fmt.Sprintf("input%d", i), func(t *testing.T) {
			defer func() {
				if t.Skipped() {
					skipped++ // rapid skips an input that runs out of data
				}
			}()
			prop(t, input)
		})
		if !ok {
			break
		}
	}
	t.Logf("%d inputs (%d ran out of data), %d events fed, %d second attempts, rules decided: %v",
		inputs, skipped, stats.events, stats.secondAttempts, stats.rules)
	if testing.Short() {
		return
	}
	for r := fsm.Rule(1); r < fsm.RuleCount; r++ { // the attempt rules; fsm.Call's are TestCallMatchesModel's
		if !callRule(r) && stats.rules[r] == 0 {
			t.Errorf("%s %v decided only %d times", r.ID(), r, stats.rules[r])
		}
	}
	if stats.secondAttempts == 0 {
		t.Errorf("only %d second attempts", stats.secondAttempts)
	}
}
