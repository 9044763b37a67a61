package main

import "github.com/replaysafe/replaysafe/internal/harness/bench"

func init() {
	extraCommands = append(extraCommands, command{"bench", "run the benchmarks (from the repository root) and print replaysafe beside its peers", bench.Main})
}
