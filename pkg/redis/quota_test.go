package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/limiter/limitertest"
)

func TestSharesContract(t *testing.T) {
	t.Parallel()
	limitertest.TestShares(t, func(t *testing.T, now func() time.Time) limitertest.Shares {
		s, _ := newTestStore(t, Options{Now: now})
		return s.Shares(SharesOptions{Timeout: testTimeout})
	})
}

// TestSharesContractCluster runs the contract on a Redis Cluster, where the
// claims of one call go to several nodes in one pipeline each.
func TestSharesContractCluster(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t)
	limitertest.TestShares(t, func(t *testing.T, now func() time.Time) limitertest.Shares {
		prefix := redistest.Prefix(t.Name())
		t.Cleanup(func() { deletePrefix(t, newClusterClient(t, addrs), prefix) })
		return New(newClusterClient(t, addrs), Options{Now: now, Prefix: prefix}).Shares(SharesOptions{Timeout: testTimeout})
	})
}

func TestShareKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want string
	}{
		{"", "p:{rlqs:60000:k:}"},
		{"a}b%c{", "p:{rlqs:60000:k:a%7Db%25c{}"},
		{strings.Repeat("x", MaxPlainKey), "p:{rlqs:60000:k:" + strings.Repeat("x", MaxPlainKey) + "}"},
		{strings.Repeat("x", MaxPlainKey+1), "p:{rlqs:60000:h:"},
	} {
		got := shareKey("p:", tc.key, time.Minute)
		if !strings.HasPrefix(got, tc.want) || (!strings.Contains(tc.want, ":h:") && got != tc.want) {
			t.Errorf("shareKey(%.20q) = %.60q, want %.60q", tc.key, got, tc.want)
		}
		if s := slot(got); s != int(crc16(got[strings.IndexByte(got, '{')+1:len(got)-1])%16384) {
			t.Errorf("shareKey(%.20q): the hash tag is not the whole identity", tc.key)
		}
	}
}

// TestSharesTTLAndRedisClock checks that a limit's hash lives exactly as
// long as its latest holding (set in the same script), under Redis's own
// clock when no test clock is given, and that releasing its last holder
// deletes it.
func TestSharesTTLAndRedisClock(t *testing.T) {
	t.Parallel()
	st, c := newTestStore(t, Options{})
	sh := st.Shares(SharesOptions{})
	ctx := context.Background()
	claim := func(holder string, hold time.Duration) limiter.Claim {
		return limiter.Claim{Key: "k", Window: time.Minute, Holder: holder, Limit: 10, Demand: 1000, Hold: hold}
	}
	if _, err := sh.Share(ctx, []limiter.Claim{claim("a", 30*time.Second), claim("b", 5*time.Second)}); err != nil {
		t.Fatal(err)
	}
	key := shareKey(st.prefix, "k", time.Minute)
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 29*time.Second || ttl > 30*time.Second {
		t.Errorf("PTTL = %v, want the latest hold, 30 s", ttl)
	}
	if n := c.HLen(ctx, key).Val(); n != 2 {
		t.Errorf("HLEN = %d, want 2 holders", n)
	}
	if err := sh.Release(ctx, []limiter.Claim{claim("a", 0), claim("b", 0)}); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("the hash outlived its last holder")
	}
}

func TestSharesRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sh := New(newClient(t, srv.Addr()), Options{}).Shares(SharesOptions{Timeout: testTimeout})
	srv.Stop()
	c := limiter.Claim{Key: "k", Window: time.Minute, Holder: "a", Limit: 1, Hold: time.Second}
	if _, err := sh.Share(context.Background(), []limiter.Claim{c}); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Share with Redis down = %v, want ErrStoreUnavailable", err)
	}
	if err := sh.Release(context.Background(), []limiter.Claim{c}); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Release with Redis down = %v, want ErrStoreUnavailable", err)
	}
}

// TestSharesScriptFlushed checks that a claim still runs after the script
// cache is flushed (EVALSHA answers NOSCRIPT, EVAL follows).
func TestSharesScriptFlushed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t) // its own server: other tests' scripts stay loaded
	c := newClient(t, srv.Addr())
	sh := New(newClient(t, srv.Addr()), Options{CallTimeout: testTimeout}).Shares(SharesOptions{})
	ctx := context.Background()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := sh.Share(ctx, []limiter.Claim{{Key: "k", Window: time.Minute, Holder: "a", Limit: 3, Demand: 3000, Hold: time.Second},
		{Key: "k2", Window: time.Minute, Holder: "a", Limit: 4, Demand: 4000, Hold: time.Second}})
	if err != nil || len(got) != 2 || got[0].Requests != 3 || got[1].Requests != 4 {
		t.Fatalf("Share after SCRIPT FLUSH = %+v, %v", got, err)
	}
}

// BenchmarkSharesReport is one Envoy report of 1, 10 or 100 buckets (one
// claim each, on limits 8 holders share): one pipelined round trip. It
// reports claims per second, the store-side cost of the quota service,
// which grows with Envoys x buckets / reporting interval, not with requests.
func BenchmarkSharesReport(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprint(n, "buckets"), func(b *testing.B) {
			sh := benchStore(b).Shares(SharesOptions{})
			ctx := context.Background()
			claims := make([]limiter.Claim, n)
			for i := range claims {
				claims[i] = limiter.Claim{Key: fmt.Sprint("bucket", i), Window: time.Minute, Limit: 1000, Demand: 5000, Hold: 10 * time.Second}
			}
			for h := range 8 { // 7 other holders on every limit
				for i := range claims {
					claims[i].Holder = fmt.Sprint("envoy", h)
				}
				if _, err := sh.Share(ctx, claims); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sh.Share(ctx, claims); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "claims/s")
		})
	}
}
