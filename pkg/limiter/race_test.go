//go:build race

package limiter_test

// raceEnabled reports a -race build, whose tests run about ten times slower:
// the heaviest tests scale their load down by it (see floodKeys).
const raceEnabled = true
