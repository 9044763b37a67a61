//go:build race

package modeltest

// raceEnabled is set when the tests run under the race detector, which
// makes the exhaustive check several times slower.
const raceEnabled = true
