package limiter_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// TestEvaluateQuotaGroup: quota hits deny only together, decided in the same
// call as the rest of the request; an admitted request consumes every
// counter, the over quota ones included, and a denied one none.
func TestEvaluateQuotaGroup(t *testing.T) {
	q := func(key string, n uint64) limiter.Hit {
		return limiter.Hit{Key: key, Limit: perMinute(n), Hits: 1, Quota: true}
	}
	for _, tc := range []struct {
		name     string
		hits     []limiter.Hit
		states   []limiter.State
		want     []limiter.Result
		wantNext []limiter.State
		wantAdm  bool
	}{
		{
			name:   "one quota hit under its limit admits the group",
			hits:   []limiter.Hit{q("a", 1), q("b", 5)},
			states: []limiter.State{sw(i0, 1, 0), sw(i0, 2, 0)},
			want: []limiter.Result{
				{RetryAfter: ms(120_000), ResetAfter: ms(120_000)},
				{Allowed: true, Remaining: 2, ResetAfter: ms(120_000)},
			},
			wantNext: []limiter.State{sw(i0, 2, 0), sw(i0, 3, 0)},
			wantAdm:  true,
		},
		{
			name:   "every quota hit over denies and nothing is consumed",
			hits:   []limiter.Hit{q("a", 1), q("b", 5), {Key: "c", Limit: perMinute(9), Hits: 1}},
			states: []limiter.State{sw(i0, 1, 0), sw(i0, 5, 0), {}},
			want: []limiter.Result{
				{RetryAfter: ms(120_000), ResetAfter: ms(120_000), OverLimit: true},
				{RetryAfter: ms(72_000), ResetAfter: ms(120_000), OverLimit: true},
				{Allowed: true, Remaining: 9},
			},
			wantNext: []limiter.State{sw(i0, 1, 0), sw(i0, 5, 0), sw(i0, 0, 0)},
		},
		{
			name:   "an enforced hit denies although the quota group admits",
			hits:   []limiter.Hit{q("a", 1), q("b", 5), {Key: "c", Limit: perMinute(0), Hits: 1}},
			states: []limiter.State{sw(i0, 1, 0), {}, {}},
			want: []limiter.Result{
				{RetryAfter: ms(120_000), ResetAfter: ms(120_000)},
				{Allowed: true, Remaining: 5},
				{ExceedsLimit: true, RetryAfter: ms(60_000), OverLimit: true},
			},
			wantNext: []limiter.State{sw(i0, 1, 0), sw(i0, 0, 0), sw(i0, 0, 0)},
		},
		{
			name:   "a quota hit shares its counter's growth",
			hits:   []limiter.Hit{q("a", 5), {Key: "a", Limit: perMinute(10), Hits: 3, Quota: true}},
			states: []limiter.State{sw(i0, 3, 0), sw(i0, 3, 0)},
			want: []limiter.Result{
				// In the next window: 3*(w-e)/w + 3 <= 5 from e = 20 s.
				{RetryAfter: ms(60_000 + 20_000), ResetAfter: ms(120_000)},
				{Allowed: true, Remaining: 4, ResetAfter: ms(120_000)},
			},
			wantNext: []limiter.State{sw(i0, 6, 0), sw(i0, 6, 0)},
			wantAdm:  true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next, adm := evaluate(t, t0, tc.hits, tc.states)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Evaluate results = %+v, want %+v", got, tc.want)
			}
			if !reflect.DeepEqual(next, tc.wantNext) {
				t.Errorf("Evaluate next = %+v, want %+v", next, tc.wantNext)
			}
			if adm != tc.wantAdm {
				t.Errorf("Evaluate admitted = %v, want %v", adm, tc.wantAdm)
			}
		})
	}
}

// BenchmarkEvaluate is the Go twin alone, on requests of one and of four
// hits that are all admitted (Evaluate allocates the Results and the next
// States: two allocations).
func BenchmarkEvaluate(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("hits=%d", n), func(b *testing.B) {
			hits := make([]limiter.Hit, n)
			for i := range hits {
				hits[i] = limiter.Hit{Key: fmt.Sprintf("domain|k%d", i), Limit: limiter.Limit{Requests: 1 << 40, Window: time.Minute}, Hits: 1}
			}
			states := make([]limiter.State, n)
			b.ReportAllocs()
			for b.Loop() {
				_, next, _, err := limiter.Evaluate(t0, hits, states)
				if err != nil {
					b.Fatal(err)
				}
				copy(states, next)
			}
		})
	}
}
