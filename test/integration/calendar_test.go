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

// TestCalendarQuota runs the built binary on a real Redis: a daily quota in
// UTC and a monthly one in Berlin, used up, are denied with Retry-After,
// duration_until_reset and the counter's TTL all counting to the next
// midnight in their zone (by Redis TIME, which here is the host's clock).
func TestCalendarQuota(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t.Name())
	s := startSluice(t, "--config", "test/integration/testdata/calendar", "--redis-url", "redis://"+addr+"/0",
		"--redis-prefix", prefix, "--response-headers", "draft", "--store-timeout", "500ms")
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key   string
		n     int
		reset func(time.Time) time.Time
	}{
		{"daily", 2, func(now time.Time) time.Time {
			y, m, d := now.UTC().Date()
			return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
		}},
		{"monthly", 1, func(now time.Time) time.Time {
			y, m, _ := now.In(berlin).Date()
			return time.Date(y, m+1, 1, 0, 0, 0, 0, berlin)
		}},
	} {
		t.Run(tc.key, func(t *testing.T) {
			d := []string{tc.key, "acme"}
			for i := range tc.n {
				if r := s.call(t, "calendar", d); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					t.Fatalf("request %d of the quota: %v", i+1, r)
				}
			}
			now := time.Now()
			r := s.call(t, "calendar", d)
			want := tc.reset(now).Sub(now)
			near := func(what string, got time.Duration) {
				t.Helper()
				if got < want-3*time.Second || got > want+3*time.Second {
					t.Errorf("%s %v, want %v (to the next reset, %v)", what, got, want, tc.reset(now))
				}
			}
			if r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("over the quota: %v, want OVER_LIMIT", r)
			}
			ra, err := strconv.Atoi(headers(r)["Retry-After"])
			if err != nil {
				t.Fatalf("Retry-After %q: %v", headers(r)["Retry-After"], err)
			}
			near("Retry-After", time.Duration(ra)*time.Second)
			near("duration_until_reset", r.GetStatuses()[0].GetDurationUntilReset().AsDuration())
			keys, err := rc.Keys(context.Background(), prefix+"*"+tc.key+"*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("counter keys %v (%v), want one", keys, err)
			}
			ttl, err := rc.PTTL(context.Background(), keys[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			near("the counter's TTL", ttl)
		})
	}
}
