//go:build libfuzzer

package fuzz

// runModelProperty, in OSS-Fuzz's libFuzzer build (go-118-fuzz-build sets
// the libfuzzer tag), checks the same property from the byte decoder:
// go-118-fuzz-build replaces the target's *testing.T with a type of its
// own, which rapid.MakeFuzz cannot take. A failure panics, which libFuzzer
// reports as a crash.
func runModelProperty(_ any, data []byte) {
	if err := CheckMachineBytes(data); err != nil {
		panic(err)
	}
}

// runCallProperty, in the libFuzzer build, checks the call rules from the
// byte decoder (CheckCallBytes), and the hedging rules from the same
// bytes read as a hedged call (CheckHedgedBytes).
func runCallProperty(_ any, data []byte) {
	if err := CheckCallBytes(data); err != nil {
		panic(err)
	}
	if err := CheckHedgedBytes(data); err != nil {
		panic(err)
	}
}
