package rls

import (
	"context"
	"testing"
	"time"
)

// TestExceedsLimitResetIsConsistent: hits larger than the limit itself are
// never admitted, and every number the answer carries says so with the same
// wait of one window: duration_until_reset, the RateLimit header's t and
// Retry-After (not t=0 and duration_until_reset 0 beside Retry-After 60).
func TestExceedsLimitResetIsConsistent(t *testing.T) {
	s, _ := newTestService(t, Options{Headers: HeadersDraft | HeadersCompat})
	r := request(desc("api_key", "big")) // per_key: 3 a minute
	r.HitsAddend = 4
	resp, err := s.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetStatuses()[0]
	if got := st.GetDurationUntilReset().AsDuration(); got != time.Minute {
		t.Errorf("duration_until_reset = %v, want 1m0s", got)
	}
	if st.GetLimitRemaining() != 0 {
		t.Errorf("limit_remaining = %d, want 0", st.GetLimitRemaining())
	}
	want := map[string]string{"RateLimit": `"per_key";r=0;t=60`, "RateLimit-Reset": "60", "Retry-After": "60", "RateLimit-Remaining": "0"}
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}
