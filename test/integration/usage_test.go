package integration

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// usageRequest is one descriptor of domain ai with its own hits_addend and
// is_negative_hits, as Envoy sends them on the request path (hits 0: a
// check) and when the stream ends (the report, or the release, which
// carries the acquire's slot token as its last entry when it has one).
func usageRequest(key, value string, hits uint64, negative bool, token ...string) *rlsv3.RateLimitRequest {
	d := &rlcommon.RateLimitDescriptor{
		Entries:        []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		HitsAddend:     wrapperspb.UInt64(hits),
		IsNegativeHits: negative,
	}
	for _, tok := range token {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: slotTokenKey, Value: tok})
	}
	return &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*rlcommon.RateLimitDescriptor{d}}
}

func (s *sluice) usage(t *testing.T, key, value string, hits uint64, negative bool, token ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	r, err := s.Client.ShouldRateLimit(context.Background(), usageRequest(key, value, hits, negative, token...))
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s=%s hits %d): %v", key, value, hits, err)
	}
	return r
}

// slotToken is the slot token r hands out, "" for none.
func slotToken(r *rlsv3.RateLimitResponse) string {
	return r.GetDynamicMetadata().GetFields()[slotTokenKey].GetStringValue()
}

// TestTokenBudget is the token budget's bypass, closed: check (hits 0), report 8000,
// check, report 8000 (over the budget, counted all the same), and the third
// check is denied; another tenant is unaffected. On Redis and in memory.
func TestTokenBudget(t *testing.T) {
	addr := redistest.Addr(t)
	for _, store := range []struct {
		name string
		args []string
	}{
		{"redis", []string{"--redis-url", "redis://" + addr + "/0", "--redis-prefix", redistest.Prefix(t.Name()), "--store-timeout", "500ms"}},
		{"memory", nil},
	} {
		t.Run(store.name, func(t *testing.T) {
			s := startSluice(t, append([]string{"--config", "test/integration/testdata/usage"}, store.args...)...)
			type step struct {
				hits      uint64
				code      rlsv3.RateLimitResponse_Code
				remaining uint32
			}
			for i, st := range []step{
				{0, rlsv3.RateLimitResponse_OK, 10000},
				{8000, rlsv3.RateLimitResponse_OK, 2000},
				{0, rlsv3.RateLimitResponse_OK, 2000},
				{8000, rlsv3.RateLimitResponse_OK, 0}, // counted: 16000 of 10000
				{0, rlsv3.RateLimitResponse_OVER_LIMIT, 0},
			} {
				r := s.usage(t, "tenant", "acme", st.hits, false)
				if r.GetOverallCode() != st.code || r.GetStatuses()[0].GetLimitRemaining() != st.remaining {
					t.Fatalf("step %d (hits %d): %v, want %v with %d remaining", i, st.hits, r, st.code, st.remaining)
				}
			}
			if r := s.usage(t, "tenant", "other", 0, false); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 10000 {
				t.Fatalf("another tenant: %v, want OK with 10000 remaining", r)
			}
		})
	}
}

// TestConcurrencyLimit: acquire 2 of 2, the third is denied, one release
// admits the next; 4 instances with 100 callers each on one key of 10 in
// flight never have more than 10 in flight (counted by the callers), and
// every slot is free at the end; a leaked slot frees itself after the
// window.
func TestConcurrencyLimit(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t.Name())
	var ss []*sluice
	for range 4 {
		ss = append(ss, startSluice(t, "--config", "test/integration/testdata/usage", "--redis-url", "redis://"+addr+"/0",
			"--redis-prefix", prefix, "--store-timeout", "2s"))
	}
	ok := func(r *rlsv3.RateLimitResponse) bool { return r.GetOverallCode() == rlsv3.RateLimitResponse_OK }

	t.Run("acquire, deny, release", func(t *testing.T) {
		s := ss[0]
		first := s.usage(t, "leaky", "a", 1, false)
		if !ok(first) || !ok(s.usage(t, "leaky", "a", 1, false)) {
			t.Fatal("acquire 1 or 2 of 2 denied")
		}
		if ok(s.usage(t, "leaky", "a", 1, false)) {
			t.Fatal("acquire 3 of 2 admitted")
		}
		s.usage(t, "leaky", "a", 1, true, slotToken(first))
		if !ok(s.usage(t, "leaky", "a", 1, false)) {
			t.Fatal("acquire after a release denied")
		}
		// Both slots now leak (never released): free one window (1 s)
		// after their acquire.
		if ok(s.usage(t, "leaky", "a", 1, false)) {
			t.Fatal("acquire over 2 leaked slots admitted")
		}
		time.Sleep(1100 * time.Millisecond)
		if !ok(s.usage(t, "leaky", "a", 1, false)) {
			t.Fatal("acquire after the leaked slots' window denied")
		}
	})

	t.Run("4 instances x 100 callers", func(t *testing.T) {
		var inFlight, peak, admitted atomic.Int64
		var wg sync.WaitGroup
		for c := range 400 {
			s := ss[c%4]
			wg.Go(func() {
				for range 5 {
					r, err := s.Client.ShouldRateLimit(context.Background(), usageRequest("inflight", "shared", 1, false))
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					if !ok(r) {
						time.Sleep(time.Millisecond)
						continue
					}
					admitted.Add(1)
					n := inFlight.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(3 * time.Millisecond)
					inFlight.Add(-1)
					if _, err := s.Client.ShouldRateLimit(context.Background(), usageRequest("inflight", "shared", 1, true, slotToken(r))); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			})
		}
		wg.Wait()
		if peak.Load() > 10 || admitted.Load() == 0 {
			t.Fatalf("peak in flight %d (admitted %d), want at most 10 and some admitted", peak.Load(), admitted.Load())
		}
		r := ss[1].usage(t, "inflight", "shared", 0, false)
		if got := r.GetStatuses()[0].GetLimitRemaining(); got != 10 {
			t.Fatalf("after every release: remaining %d, want all 10 free", got)
		}
		t.Logf("%d acquires admitted, peak %d in flight", admitted.Load(), peak.Load())
	})
}
