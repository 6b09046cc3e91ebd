package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestPenalty runs the built binary on a real Redis: a key that goes over
// its 2 a second is blocked for the penalty's hour (Retry-After says so,
// and a request in the next window is still denied), its block kept beside
// the counter until forget after the block ends; a shadow-mode rule with
// the same penalty records the block and never denies.
func TestPenalty(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t.Name())
	s := startSluice(t, "--config", "test/integration/testdata/penalty", "--redis-url", "redis://"+addr+"/0",
		"--redis-prefix", prefix, "--response-headers", "draft", "--store-timeout", "500ms")
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	blockKey := func(key string) time.Duration {
		t.Helper()
		keys, err := rc.Keys(context.Background(), prefix+"*"+key+"*:p").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("block keys %v (%v), want one", keys, err)
		}
		ttl, err := rc.PTTL(context.Background(), keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ttl
	}

	d := []string{"offender", "acme"}
	for i := range 2 {
		if r := s.call(t, "penalty", d); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d under the limit: %v", i+1, r)
		}
	}
	for i := range 2 { // the offence, then a request after the window (the block holds)
		r := s.call(t, "penalty", d)
		if r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("request %d over the limit: %v, want OVER_LIMIT", i+1, r)
		}
		ra, err := strconv.Atoi(headers(r)["Retry-After"])
		if err != nil || ra < 3590 || ra > 3600 {
			t.Fatalf("Retry-After %q (%v), want the hour's block", headers(r)["Retry-After"], err)
		}
	}
	if ttl := blockKey("offender"); ttl < 25*time.Hour-time.Minute || ttl > 25*time.Hour {
		t.Errorf("the block's TTL %v, want the block and forget, 25h", ttl)
	}

	w := []string{"watched", "acme"}
	for i := range 5 {
		if r := s.call(t, "penalty", w); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow request %d: %v, want OK", i+1, r)
		}
	}
	if ttl := blockKey("watched"); ttl < 25*time.Hour-time.Minute {
		t.Errorf("the shadow rule's block TTL %v, want it recorded (25h)", ttl)
	}
}
