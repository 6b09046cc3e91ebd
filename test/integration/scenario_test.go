package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// awayFromBoundary waits, if needed, so that the next few seconds stay inside
// one minute window: the exact remaining counts asserted below assume no
// previous window weighs in.
func awayFromBoundary() {
	if s := time.Now().Unix() % 60; s > 45 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
}

func code(r *rlsv3.RateLimitResponse, i int) string {
	if r.GetStatuses()[i].GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		return "OVER"
	}
	return "OK"
}

// TestDemoScenario sends the descriptors examples/envoy/envoy.yaml makes
// Envoy send for a sequence of demo requests, against the config/ directory
// and a real Redis, and checks codes, statuses and headers.
func TestDemoScenario(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t.Name())
	s := startSluice(t, "--config", "config", "--redis-url", "redis://"+addr+"/0", "--redis-prefix", prefix,
		"--response-headers", "draft,compat", "--store-timeout", "500ms")
	awayFromBoundary()

	alice := []string{"api_key", "alice"}
	aliceSearch := []string{"api_key", "alice", "route", "search"}
	// GET /v1/search with x-api-key: alice, 11 times.
	for i := 1; i <= 10; i++ {
		r := s.call(t, "edge", alice, aliceSearch)
		if r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("search %d: %v", i, r)
		}
		if got, want := r.GetStatuses()[0].GetLimitRemaining(), uint32(100-i); got != want {
			t.Errorf("search %d: per_api_key remaining %d, want %d", i, got, want)
		}
		if got, want := r.GetStatuses()[1].GetLimitRemaining(), uint32(10-i); got != want {
			t.Errorf("search %d: search remaining %d, want %d", i, got, want)
		}
		h := headers(r)
		if want := `"search_per_api_key";r=` + strconv.Itoa(10-i) + ";t="; !strings.HasPrefix(h["RateLimit"], want) {
			t.Errorf("search %d: RateLimit %q, want prefix %q", i, h["RateLimit"], want)
		}
		if _, ok := h["Retry-After"]; ok {
			t.Errorf("search %d: Retry-After on an allowed request", i)
		}
	}
	r := s.call(t, "edge", alice, aliceSearch)
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || code(r, 0) != "OK" || code(r, 1) != "OVER" {
		t.Fatalf("search 11: %v", r)
	}
	if got := r.GetStatuses()[0].GetLimitRemaining(); got != 90 {
		t.Errorf("search 11: per_api_key remaining %d, want 90 (a denied request consumes nothing)", got)
	}
	h := headers(r)
	if want := `"per_api_key";q=100;w=60, "search_per_api_key";q=10;w=60`; h["RateLimit-Policy"] != want {
		t.Errorf("RateLimit-Policy %q, want %q", h["RateLimit-Policy"], want)
	}
	// The 10 hits of this minute weigh fully at the start of the next one,
	// so the 11th fits only once a tenth of that window has passed too:
	// Retry-After is (60 s - elapsed) + 6 s, between 6 and 66 s.
	retry, err := strconv.Atoi(h["Retry-After"])
	if err != nil || retry < 6 || retry > 66 {
		t.Errorf("Retry-After %q, want 6..66", h["Retry-After"])
	}
	if h["RateLimit-Limit"] != "10" || h["RateLimit-Remaining"] != "0" || !strings.HasPrefix(h["RateLimit"], `"search_per_api_key";r=0;t=`) {
		t.Errorf("denied headers %v", h)
	}
	if reset, _ := strconv.Atoi(h["RateLimit-Reset"]); reset < retry || reset > 120 {
		t.Errorf("RateLimit-Reset %d, want between Retry-After %d and 120", reset, retry)
	}

	// Bob is independent of Alice.
	r = s.call(t, "edge", []string{"api_key", "bob"}, []string{"api_key", "bob", "route", "search"})
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[1].GetLimitRemaining() != 9 {
		t.Errorf("bob: %v", r)
	}

	// Report paths share one budget across keys and paths.
	r = s.call(t, "edge", []string{"api_key", "carol"}, []string{"path", "/v1/reports/2026"})
	r2 := s.call(t, "edge", []string{"api_key", "dave"}, []string{"path", "/v1/reports/other"})
	if r.GetStatuses()[1].GetLimitRemaining() != 29 || r2.GetStatuses()[1].GetLimitRemaining() != 28 {
		t.Errorf("shared reports budget: %d then %d, want 29 then 28", r.GetStatuses()[1].GetLimitRemaining(), r2.GetStatuses()[1].GetLimitRemaining())
	}

	// An internal key: matched, never limited.
	r = s.call(t, "edge", []string{"api_key_internal", "billing"})
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit() != nil || len(r.GetResponseHeadersToAdd()) != 0 {
		t.Errorf("internal: %v", r)
	}

	// Uploads are in shadow mode: over 5 a second, still OK.
	for i := 1; i <= 7; i++ {
		r = s.call(t, "edge", []string{"api_key", "erin"}, []string{"generic_key", "beta_upload"})
		if r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("upload %d: %v", i, r)
		}
	}

	// One anonymous client address: 20 a minute.
	for i := 1; i <= 21; i++ {
		r = s.call(t, "edge", []string{"remote_address", "203.0.113.9"})
		want := "OK"
		if i == 21 {
			want = "OVER"
		}
		if code(r, 0) != want {
			t.Fatalf("address call %d: %v, want %s", i, r, want)
		}
	}

	// Every key Sluice wrote expires within two windows (this config has no
	// token bucket, whose key expires when it is full again).
	keys, err := redistest.Do(addr, "KEYS", prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	list, _ := keys.([]any)
	if len(list) < 6 {
		t.Errorf("%d keys under %q, want at least 6", len(list), prefix)
	}
	for _, k := range list {
		ttl, err := redistest.Do(addr, "PTTL", k.(string))
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := ttl.(int64); n <= 0 || n > 2*60*1000 {
			t.Errorf("key %q has PTTL %v, want 1..120000 ms", k, ttl)
		}
	}
}

// TestRetryAfterAdmits checks that a client that waits exactly Retry-After
// seconds is admitted.
func TestRetryAfterAdmits(t *testing.T) {
	addr := redistest.Addr(t)
	s := startSluice(t, "--config", "test/integration/testdata/fast.yaml", "--redis-url", "redis://"+addr+"/0",
		"--redis-prefix", redistest.Prefix(t.Name()), "--store-timeout", "500ms")
	for round := 0; round < 3; round++ {
		var r *rlsv3.RateLimitResponse
		for i := 0; i < 10; i++ {
			if r = s.call(t, "fast", []string{"client", "c"}); r.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				break
			}
		}
		if r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("round %d: never over the limit of 3 a second", round)
		}
		retry, err := strconv.Atoi(headers(r)["Retry-After"])
		if err != nil || retry < 1 || retry > 2 {
			t.Fatalf("round %d: Retry-After %q, want 1 or 2 (3 a second)", round, headers(r)["Retry-After"])
		}
		time.Sleep(time.Duration(retry) * time.Second)
		if r = s.call(t, "fast", []string{"client", "c"}); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("round %d: after waiting Retry-After=%d s: %v", round, retry, r)
		}
	}
}
