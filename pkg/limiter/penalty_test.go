package limiter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// penaltyLimit is 2 hits a second with a 10 s block doubling to at most
// 30 s, forgotten 60 s after a block ends.
var penaltyLimit = limiter.Limit{Requests: 2, Window: time.Second, Algorithm: limiter.FixedWindow,
	Penalty: limiter.Penalty{Block: 10 * time.Second, Escalate: 2, Max: 30 * time.Second, Forget: time.Minute}}

// offend spends the limit at now and returns the denial that follows.
func offendAt(t *testing.T, s limiter.Store, l limiter.Limit) limiter.Result {
	t.Helper()
	for i := range 2 {
		if r := allow(t, s, l); !r.Allowed {
			t.Fatalf("hit %d under the limit: %+v, want allowed", i+1, r)
		}
	}
	return allow(t, s, l)
}

// TestPenaltyEscalatesAndIsForgotten: a denial blocks the key for the
// block, whatever its window says; an offence within forget of the last
// block doubles it up to max; one after forget starts over.
func TestPenaltyEscalatesAndIsForgotten(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: func() time.Time { return now }})
	l := penaltyLimit
	if r := offendAt(t, s, l); r.Allowed || r.RetryAfter != 10*time.Second || r.ResetAfter != 10*time.Second {
		t.Fatalf("first offence: %+v, want denied for 10s", r)
	}
	now = now.Add(4 * time.Second) // a new window, still blocked
	if r := allow(t, s, l); r.Allowed || !r.OverLimit || r.RetryAfter != 6*time.Second {
		t.Fatalf("during the block: %+v, want denied for the 6s left", r)
	}
	now = now.Add(6 * time.Second) // the block ends; the blocked hit consumed nothing
	if r := offendAt(t, s, l); r.Allowed || r.RetryAfter != 20*time.Second {
		t.Fatalf("second offence: %+v, want denied for 20s", r)
	}
	now = now.Add(20 * time.Second)
	if r := offendAt(t, s, l); r.Allowed || r.RetryAfter != 30*time.Second {
		t.Fatalf("third offence: %+v, want denied for max, 30s", r)
	}
	now = now.Add(30 * time.Second)
	if r := offendAt(t, s, l); r.Allowed || r.RetryAfter != 30*time.Second {
		t.Fatalf("fourth offence: %+v, want denied for max, 30s", r)
	}
	now = now.Add(30*time.Second + time.Minute) // forget has passed since the block ended
	if r := offendAt(t, s, l); r.Allowed || r.RetryAfter != 10*time.Second {
		t.Fatalf("after forget: %+v, want a first offence's 10s", r)
	}
}

// TestPenaltyShadow: a shadow hit reports the block (not Allowed, with its
// RetryAfter) but never denies its request, which is counted.
func TestPenaltyShadow(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s := limiter.NewMemoryStore(limiter.MemoryOptions{Now: func() time.Time { return now }})
	hit := []limiter.Hit{{Key: "tenant", Limit: penaltyLimit, Hits: 1, Shadow: true}}
	var r []limiter.Result
	for i := range 4 {
		var err error
		if r, err = s.Apply(context.Background(), hit); err != nil {
			t.Fatal(err)
		}
		if r[0].OverLimit {
			t.Fatalf("shadow hit %d: %+v, want never over the limit", i+1, r[0])
		}
	}
	if r[0].Allowed || r[0].RetryAfter != 10*time.Second {
		t.Fatalf("4th shadow hit: %+v, want reported as blocked for 10s", r[0])
	}
}

// TestPenaltyValidate: a bad penalty is refused with the field named.
func TestPenaltyValidate(t *testing.T) {
	for _, tc := range []struct {
		p    limiter.Penalty
		want string
	}{
		{limiter.Penalty{Escalate: 2, Max: time.Hour}, "block"},
		{limiter.Penalty{Block: time.Minute, Max: time.Hour}, "escalate"},
		{limiter.Penalty{Block: time.Minute, Escalate: 2, Max: time.Second}, "max"},
		{limiter.Penalty{Block: time.Minute, Escalate: 2, Max: time.Hour, Forget: -time.Second}, "forget"},
	} {
		l := penaltyLimit
		l.Penalty = tc.p
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "penalty: "+tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.p, err, tc.want)
		}
	}
	l := penaltyLimit
	l.Algorithm, l.Requests = limiter.Concurrency, 2
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "penalty") {
		t.Errorf("a penalty on concurrency: %v, want refused", err)
	}
}
