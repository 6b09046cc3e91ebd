package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// failoverBound is how long after the master dies sluice may take to decide
// against the promoted replica: Sentinel needs down-after-milliseconds (1 s)
// plus an election and a promotion, then sluice must find the new master.
const failoverBound = 15 * time.Second

// TestSentinelFailover runs sluice against 3 Sentinels watching a master and
// its replica, kills the master, and checks that sluice decides correctly
// against the promoted replica without a restart. Counters written before
// the failover may not have reached the replica, so the check uses fresh
// keys.
func TestSentinelFailover(t *testing.T) {
	f := redistest.Failover(t)
	s := startSluice(t, "--config", "test/integration/testdata/chaos",
		"--redis-sentinel-master", redistest.SentinelMaster,
		"--redis-sentinel-addrs", strings.Join(f.SentinelAddrs(), ","),
		"--redis-prefix", redistest.Prefix(t.Name()), "--store-timeout", "500ms")

	countdown(t, s, "chaos_unset", "before")
	if got := keysOn(t, f.Master.Addr()); got == 0 {
		t.Fatalf("no counter on the master %s before the failover: sluice is not using it", f.Master.Addr())
	}

	f.Master.Stop()
	killed := time.Now()
	// Sluice decides again as soon as it reaches the promoted replica; ask
	// with fresh keys until it does.
	var resp *rlsv3.RateLimitResponse
	var err error
	i := 0
	if !eventually(time.Until(killed.Add(failoverBound)), 20*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err = s.Client.ShouldRateLimit(ctx, request("chaos_unset", []string{"probe", fmt.Sprintf("failover-%d", i)}))
		i++
		return decided(resp, err)
	}) {
		a, aerr := f.MasterAddr()
		t.Fatalf("no decision %v after the master died (last answer %v, %v; sentinels' master %q %v)\n%s",
			failoverBound, resp, err, a, aerr, s.Log())
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 4 {
		t.Errorf("first decision after the failover on a fresh key: %v, want OK remaining 4", resp)
	}
	decidedAt := time.Now()
	promoted, err := f.WaitPromoted(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("master killed: sluice decided again after %v; sentinels agreed on the promoted replica %v after that check began",
		decidedAt.Sub(killed).Round(time.Millisecond), promoted.Round(time.Millisecond))

	countdown(t, s, "chaos_unset", "after")
	countdown(t, s, "chaos_deny", "after")
	if r, err := redistest.Do(f.Replica.Addr(), "KEYS", "*after-*"); err != nil || len(r.([]any)) == 0 {
		t.Errorf("no counter written after the failover on the promoted replica %s (%v, %v): sluice decided elsewhere", f.Replica.Addr(), r, err)
	}
}

// keysOn returns the number of keys in db 0 of the Redis at addr.
func keysOn(t *testing.T, addr string) int64 {
	t.Helper()
	r, err := redistest.Do(addr, "DBSIZE")
	if err != nil {
		t.Fatalf("DBSIZE on %s: %v", addr, err)
	}
	n, _ := r.(int64)
	return n
}
