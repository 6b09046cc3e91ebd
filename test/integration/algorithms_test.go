package integration

import (
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestAlgorithmsScenario runs the built binary on a real Redis: a token
// bucket takes a burst and then its refill rate, and a request that the
// per-second limit of a descriptor's rate_limits denies does not count
// against its per-minute limit.
func TestAlgorithmsScenario(t *testing.T) {
	addr := redistest.Addr(t)
	s := startSluice(t, "--config", "test/integration/testdata/algorithms", "--redis-url", "redis://"+addr+"/0",
		"--redis-prefix", redistest.Prefix(t.Name()), "--response-headers", "draft", "--store-timeout", "500ms")
	ok := func(r *rlsv3.RateLimitResponse) bool { return r.GetOverallCode() == rlsv3.RateLimitResponse_OK }

	t.Run("token bucket: burst, then the rate", func(t *testing.T) {
		bucket := []string{"bucket", "b"}
		for i := range 5 {
			if r := s.call(t, "algorithms", bucket); !ok(r) {
				t.Fatalf("burst request %d: %v", i+1, r)
			}
		}
		r := s.call(t, "algorithms", bucket)
		if ok(r) || headers(r)["Retry-After"] != "1" {
			t.Fatalf("6th request of the burst: %v, want OVER_LIMIT with Retry-After 1", r)
		}
		// 2 tokens a second: after 1.1 s two fit, the third does not.
		time.Sleep(1100 * time.Millisecond)
		for i := range 2 {
			if r := s.call(t, "algorithms", bucket); !ok(r) {
				t.Fatalf("refilled request %d: %v", i+1, r)
			}
		}
		if r := s.call(t, "algorithms", bucket); ok(r) {
			t.Fatalf("third request after 1.1 s of refill: %v, want OVER_LIMIT", r)
		}
	})

	t.Run("per second and per minute on one descriptor", func(t *testing.T) {
		tenant := []string{"tenant", "acme"}
		for i := range 3 {
			if r := s.call(t, "algorithms", tenant); !ok(r) {
				t.Fatalf("request %d: %v", i+1, r)
			}
		}
		for range 4 {
			r := s.call(t, "algorithms", tenant)
			if ok(r) || !strings.HasPrefix(headers(r)["RateLimit"], `"tenant/1s";r=0`) {
				t.Fatalf("4th request in one second: %v, want OVER_LIMIT by tenant/1s", r)
			}
		}
		// The four denials consumed nothing: the minute has 2 of 5 left.
		time.Sleep(1100 * time.Millisecond)
		r := s.call(t, "algorithms", tenant)
		if !ok(r) || r.GetStatuses()[0].GetLimitRemaining() != 1 || !strings.HasPrefix(headers(r)["RateLimit"], `"tenant/1m";r=1`) {
			t.Fatalf("after a second: %v, want OK with tenant/1m binding, 1 remaining", r)
		}
		if r := s.call(t, "algorithms", tenant); !ok(r) {
			t.Fatalf("5th counted request: %v", r)
		}
		r = s.call(t, "algorithms", tenant)
		if ok(r) || !strings.HasPrefix(headers(r)["RateLimit"], `"tenant/1m";r=0`) || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 5 {
			t.Fatalf("6th counted request: %v, want OVER_LIMIT by tenant/1m", r)
		}
		if !strings.Contains(headers(r)["RateLimit-Policy"], `"tenant/1s";q=3;w=1, "tenant/1m";q=5;w=60`) {
			t.Errorf("RateLimit-Policy %q, want both limits", headers(r)["RateLimit-Policy"])
		}
	})
}
