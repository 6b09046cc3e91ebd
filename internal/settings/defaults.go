package settings

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// maxBurstPercent bounds --token-bucket-burst: a bucket a thousand windows
// deep is no longer a rate.
const maxBurstPercent = 100_000

// rateAlgorithms lists the algorithms --algorithm takes: every one that
// counts requests, not one that counts requests in flight (concurrency
// needs Envoy to release each request, which a rule must ask for itself).
func rateAlgorithms() string {
	var names []string
	for _, a := range limiter.AlgorithmsWith(func(t limiter.Traits) bool { return !t.InFlight }) {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// validateDefaults checks --algorithm, --sub-windows and
// --token-bucket-burst.
func (s *Settings) validateDefaults() error {
	a, ok := limiter.ParseAlgorithm(s.Algorithm)
	if !ok || a.Traits().InFlight {
		return fmt.Errorf("--algorithm: unknown %q (want %s)", s.Algorithm, rateAlgorithms())
	}
	if s.SubWindows < 1 || s.SubWindows > limiter.MaxSubWindows {
		return fmt.Errorf("--sub-windows: %d must be 1 to %d", s.SubWindows, limiter.MaxSubWindows)
	}
	if _, err := burstPercent(s.TokenBucketBurst); err != nil {
		return fmt.Errorf("--token-bucket-burst: %v", err)
	}
	return nil
}

// burstPercent parses a share of a limit written "150%".
func burstPercent(v string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimSuffix(v, "%"), 10, 32)
	if err != nil || !strings.HasSuffix(v, "%") || n < 1 || n > maxBurstPercent {
		return 0, fmt.Errorf("%q: want a whole percentage from 1%% to %d%%, such as 200%%", v, maxBurstPercent)
	}
	return uint32(n), nil
}

// Defaults are --algorithm, --sub-windows and --token-bucket-burst,
// validated, for the limits that set none: each Field set only when the
// setting differs from the format's default, its position naming the
// flag, so that a limit that cannot take it is an error naming it.
func (s *Settings) Defaults() descriptors.Defaults {
	var d descriptors.Defaults
	if a, _ := limiter.ParseAlgorithm(s.Algorithm); a != limiter.Algorithm(0) {
		d.Algorithm = from(a.String(), "--algorithm")
	}
	if s.SubWindows != limiter.DefaultSubWindows {
		d.SubWindows = from(uint32(s.SubWindows), "--sub-windows")
	}
	if p, _ := burstPercent(s.TokenBucketBurst); p != 100 {
		d.BurstPercent = from(p, "--token-bucket-burst")
	}
	return d
}

func from[T any](v T, flag string) descriptors.Field[T] {
	f := descriptors.Set(v)
	f.Pos.File, f.KeyPos.File = flag, flag
	return f
}

// DefaultsInForce is the start-up line's account of the defaults of the
// rules that set none: "algorithm=sliding_window sub_windows=50
// token_bucket_burst=100% failure_mode=error cache=false".
func (s *Settings) DefaultsInForce() string {
	return fmt.Sprintf("algorithm=%s sub_windows=%d token_bucket_burst=%s failure_mode=%s cache=%t",
		s.Algorithm, s.SubWindows, s.TokenBucketBurst, s.FailureMode, s.Cache)
}
