package main

import "github.com/replaysafe/replaysafe/internal/harness/soak"

func init() {
	extraCommands = append(extraCommands, command{"soak", "run many concurrent requests against an in-process faulty server and check the bounds", soak.Main})
}
