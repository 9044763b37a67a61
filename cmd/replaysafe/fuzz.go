package main

import "github.com/replaysafe/replaysafe/internal/harness/campaign"

func init() {
	extraCommands = append(extraCommands, command{"fuzz", "run every fuzz target as a campaign, with progress and a summary", campaign.Main})
}
