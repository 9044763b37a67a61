package main

import "github.com/replaysafe/replaysafe/internal/conformance"

func init() {
	extraCommands = append(extraCommands, command{"conformance", "run the fault scenarios over loopback, replaysafe beside net/http", conformance.Main})
}
