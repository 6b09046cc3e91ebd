package limiter_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

func TestAlgorithmNames(t *testing.T) {
	all := limiter.Algorithms()
	want := []limiter.Algorithm{limiter.SlidingWindow, limiter.TokenBucket, limiter.FixedWindow, limiter.SlidingLog, limiter.Concurrency}
	if !slices.Equal(all, want) {
		t.Fatalf("Algorithms() = %v, want %v", all, want)
	}
	for i, name := range []string{"sliding_window", "token_bucket", "fixed_window", "sliding_log", "concurrency"} {
		if got := want[i].String(); got != name {
			t.Errorf("Algorithm(%d).String() = %q, want %q", i, got, name)
		}
	}
	for _, a := range all {
		got, ok := limiter.ParseAlgorithm(a.String())
		if !ok || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v, want %v", a.String(), got, ok, a)
		}
	}
	if got := limiter.SlidingWindow.String(); got != "sliding_window" {
		t.Errorf("SlidingWindow.String() = %q", got)
	}
	if got := limiter.Algorithm(200).String(); got != "algorithm(200)" {
		t.Errorf("Algorithm(200).String() = %q, want algorithm(200)", got)
	}
	for _, s := range []string{"", "Sliding_Window", "token-bucket", "algorithm(0)"} {
		if a, ok := limiter.ParseAlgorithm(s); ok {
			t.Errorf("ParseAlgorithm(%q) = %v, true; want false", s, a)
		}
	}
}

func TestLimitValidate(t *testing.T) {
	for _, tc := range []struct {
		l     limiter.Limit
		field string // "" means valid
	}{
		{limiter.Limit{Requests: 0, Window: time.Millisecond}, ""},
		{limiter.Limit{Requests: 10, Window: time.Minute, Algorithm: limiter.SlidingWindow}, ""},
		{limiter.Limit{}, "window"},
		{limiter.Limit{Requests: 1, Window: -time.Second}, "window"},
		{limiter.Limit{Requests: 1, Window: 1500 * time.Microsecond}, "window"},
		{limiter.Limit{Requests: 1, Window: time.Minute, Algorithm: 5}, "algorithm"},
		{limiter.Limit{Requests: 1, Window: time.Minute, SubWindows: 60}, ""},
		{limiter.Limit{Requests: 1, Window: time.Second, SubWindows: 60}, "sub_windows"},
		{limiter.Limit{Requests: 1, Window: time.Hour, SubWindows: 61}, "sub_windows"},
		{limiter.Limit{Requests: 1, Window: time.Minute, Burst: 2}, "burst"},
		{limiter.Limit{Requests: 1, Window: time.Minute, Algorithm: limiter.TokenBucket, Burst: 2}, ""},
		{limiter.Limit{Requests: 0, Window: time.Minute, Algorithm: limiter.TokenBucket, Burst: 2}, "burst"},
		{limiter.Limit{Requests: 1, Window: time.Minute, Algorithm: limiter.TokenBucket, SubWindows: 2}, "sub_windows"},
		{limiter.Limit{Requests: 1 << 40, Window: 24 * time.Hour, Algorithm: limiter.TokenBucket}, "burst"},
		{limiter.Limit{Requests: 1, Window: time.Minute, Algorithm: limiter.FixedWindow, Burst: 1}, "burst"},
		{limiter.Limit{Requests: 1000, Window: time.Minute, Algorithm: limiter.SlidingLog}, ""},
		{limiter.Limit{Requests: 1001, Window: time.Minute, Algorithm: limiter.SlidingLog}, "requests"},
		{limiter.Limit{Requests: 1001, Window: time.Minute, Algorithm: limiter.Concurrency}, "requests"},
		{limiter.Limit{Requests: 1, Window: time.Minute, Algorithm: limiter.Concurrency, SubWindows: 2}, "sub_windows"},
		{limiter.Limit{Requests: 1, Algorithm: 200}, "algorithm"},
		{limiter.Limit{Requests: 1, Window: time.Minute, CountDenied: true}, ""},
		{limiter.Limit{Requests: 1, Window: time.Minute, Algorithm: limiter.FixedWindow, CountDenied: true}, ""},
		{limiter.Limit{Requests: 1, Window: time.Minute, Algorithm: limiter.SlidingLog, CountDenied: true}, "count_denied"},
		{limiter.Limit{Requests: 1, Window: time.Minute, Algorithm: limiter.Concurrency, CountDenied: true}, "count_denied"},
		{limiter.Limit{Requests: 1, Window: time.Minute, Overdraw: true, CountDenied: true}, "count_denied"},
		// A pool's class neither overdraws nor counts denied hits: either
		// would take the classes above it past their reserve.
		{limiter.Limit{Requests: 10, Window: time.Minute, Ceiling: 500, Overdraw: true}, "ceiling"},
		{limiter.Limit{Requests: 10, Window: time.Minute, Ceiling: 1000, CountDenied: true}, "ceiling"},
	} {
		err := tc.l.Validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v.Validate() = %v, want nil", tc.l, err)
		case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field+": ")):
			t.Errorf("%+v.Validate() = %v, want an error naming %s", tc.l, err, tc.field)
		}
	}
}

func TestLimitCapacity(t *testing.T) {
	if got := (limiter.Limit{Requests: 7, Window: time.Second}).Capacity(); got != 7 {
		t.Errorf("sliding window Capacity() = %d, want Requests (7)", got)
	}
	if got := (limiter.Limit{Requests: 7, Window: time.Second, Algorithm: limiter.TokenBucket}).Capacity(); got != 7 {
		t.Errorf("token bucket Capacity() = %d, want Requests (7)", got)
	}
	if got := (limiter.Limit{Requests: 7, Window: time.Second, Algorithm: limiter.TokenBucket, Burst: 20}).Capacity(); got != 20 {
		t.Errorf("token bucket Capacity() = %d, want Burst (20)", got)
	}
	if got := (limiter.Limit{Requests: 7, Window: time.Second, Algorithm: 200}).Capacity(); got != 0 {
		t.Errorf("unknown algorithm Capacity() = %d, want 0", got)
	}
}

func TestMarkOverLimit(t *testing.T) {
	const (
		E  = iota // enforced
		S         // shadow
		Q         // quota
		R         // refund
		QS        // quota and shadow: outside the group
		QR        // quota and refund: outside the group
	)
	for _, tc := range []struct {
		name    string
		kinds   []int
		allowed []bool
		over    []bool
		adm     bool
	}{
		{"no hits", nil, nil, nil, true},
		{"enforced allowed", []int{E}, []bool{true}, []bool{false}, true},
		{"enforced denied", []int{E, E}, []bool{true, false}, []bool{false, true}, false},
		{"shadow never over", []int{S, E}, []bool{false, true}, []bool{false, false}, true},
		{"refund never over", []int{R}, []bool{false}, []bool{false}, true},
		{"one quota hit allowed admits the group", []int{Q, Q}, []bool{false, true}, []bool{false, false}, true},
		{"every quota hit denied", []int{Q, Q, E}, []bool{false, false, true}, []bool{true, true, false}, false},
		{"quota group admits, enforced denies", []int{Q, Q, E}, []bool{false, true, false}, []bool{false, false, true}, false},
		{"a quota shadow hit is not in the group", []int{Q, QS}, []bool{false, true}, []bool{true, false}, false},
		{"a quota refund is not in the group", []int{QR, Q}, []bool{true, false}, []bool{false, true}, false},
		{"only quota shadow hits", []int{QS, QS}, []bool{false, false}, []bool{false, false}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits := make([]limiter.Hit, len(tc.kinds))
			results := make([]limiter.Result, len(tc.kinds))
			for i, k := range tc.kinds {
				hits[i] = limiter.Hit{Shadow: k == S || k == QS, Quota: k == Q || k == QS || k == QR, Refund: k == R || k == QR}
				results[i] = limiter.Result{Allowed: tc.allowed[i], OverLimit: !tc.over[i]} // stale on purpose
			}
			if adm := limiter.MarkOverLimit(hits, results); adm != tc.adm {
				t.Errorf("MarkOverLimit admitted = %v, want %v", adm, tc.adm)
			}
			for i, r := range results {
				if r.OverLimit != tc.over[i] || r.Allowed != tc.allowed[i] {
					t.Errorf("result %d = %+v, want OverLimit %v and Allowed unchanged", i, r, tc.over[i])
				}
			}
		})
	}
}

// TestHitValidate: a slot token must fit a double exactly (the Lua twin
// compares them), and the Limit must Validate.
func TestHitValidate(t *testing.T) {
	l := limiter.Limit{Requests: 1, Window: time.Minute, Algorithm: limiter.Concurrency}
	for _, tc := range []struct {
		h     limiter.Hit
		field string
	}{
		{limiter.Hit{Limit: l, SlotToken: limiter.MaxSlotToken}, ""},
		{limiter.Hit{Limit: l, SlotToken: limiter.MaxSlotToken + 1}, "slot_token"},
		{limiter.Hit{Limit: limiter.Limit{Requests: 1}}, "window"},
	} {
		err := tc.h.Validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v.Validate() = %v, want nil", tc.h, err)
		case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field+": ")):
			t.Errorf("%+v.Validate() = %v, want an error naming %s", tc.h, err, tc.field)
		}
	}
	for range 1000 {
		if tok := limiter.NewSlotToken(); tok == 0 || tok > limiter.MaxSlotToken {
			t.Fatalf("NewSlotToken() = %d, want 1 to %d", tok, uint64(limiter.MaxSlotToken))
		}
	}
}
