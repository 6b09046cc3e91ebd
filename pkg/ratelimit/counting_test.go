package ratelimit_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// countingYAML has a plain limit of 20 a minute, one with its own overdraw:
// false, a concurrency limit of 5, and a pool of 300 a minute whose test
// class stops at 50%.
const countingYAML = `domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: strict
    rate_limit: {unit: minute, requests_per_unit: 20, overdraw: false}
  - key: streams
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: concurrency}
  - key: pool
    value: db
    rate_limit: {unit: minute, requests_per_unit: 300}
    classes:
      key: priority
      ceilings:
        - {value: critical, ceiling: 100%}
        - {value: test, ceiling: 50%}
  - key: workers
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: concurrency}
    classes:
      key: priority
      ceilings:
        - {value: critical, ceiling: 100%}
        - {value: test, ceiling: 50%}
`

func countingService(t *testing.T, o ratelimit.Options) *ratelimit.Service {
	t.Helper()
	cfg, err := descriptors.Parse(descriptors.Source{Name: "counting.yaml", Data: []byte(countingYAML)})
	if err != nil {
		t.Fatal(err)
	}
	o.Store = limiter.NewMemoryStore(limiter.MemoryOptions{Now: testclock.New(epoch).Now})
	s := ratelimit.New(o)
	s.SetConfig(cfg)
	return s
}

func decideHits(t *testing.T, s *ratelimit.Service, hits uint64, refund bool, es ...descriptors.Entry) ratelimit.Decision {
	t.Helper()
	d, err := s.Decide(context.Background(), &ratelimit.Request{Domain: "edge",
		Descriptors: []ratelimit.Descriptor{{Entries: es, HitsAddend: hits, HasHitsAddend: true, IsNegativeHits: refund}}})
	if err != nil {
		t.Fatalf("Decide(%v): %v", es, err)
	}
	return d
}

// TestCountDenied: with CountDenied (the peer's counting), hits_addend 15
// twice on 20 a minute is OK, then OVER_LIMIT, and both count; a fresh key
// with 1,000,000 hits is OVER_LIMIT; a rule with its own overdraw: false
// keeps all or nothing; a flood of 2,000 of a pool's test class leaves
// critical all 300 (a shed request consumes nothing in every mode).
func TestCountDenied(t *testing.T) {
	for _, o := range []ratelimit.Options{{CountDenied: true}, {CountDenied: true, Overdraw: true}} {
		t.Run(fmt.Sprintf("overdraw %v", o.Overdraw), func(t *testing.T) {
			s := countingService(t, o)
			codes := func(es []descriptors.Entry, hits ...uint64) string {
				out := ""
				for _, n := range hits {
					d := decideHits(t, s, n, false, es...)
					out += fmt.Sprintf("%v:%d ", d.Code, d.Statuses[0].Result.Remaining)
				}
				return out
			}
			if o.Overdraw {
				// Overdraw wins where both apply: admitted while under the limit.
				if got := codes(entries("tenant", "a"), 15, 15, 0); got != "OK:5 OK:0 OVER_LIMIT:0 " {
					t.Errorf("overdraw: 15, 15, 0 hits: %s", got)
				}
			} else {
				if got := codes(entries("tenant", "a"), 15, 15, 0); got != "OK:5 OVER_LIMIT:0 OVER_LIMIT:0 " {
					t.Errorf("count denied: 15, 15, 0 hits: %s, want OK, then OVER_LIMIT, counted", got)
				}
				if got := codes(entries("tenant", "b"), 1_000_000, 0); got != "OVER_LIMIT:0 OVER_LIMIT:0 " {
					t.Errorf("count denied: 1,000,000 hits on a fresh key, then a check: %s, want OVER_LIMIT, counted", got)
				}
			}
			if got := codes(entries("strict", "a"), 15, 15, 5); got != "OK:5 OVER_LIMIT:0 OK:0 " {
				t.Errorf("rule with overdraw: false: 15, 15, 5 hits: %s, want the denied 15 not counted", got)
			}
			for range 2000 {
				decideHits(t, s, 1, false, entries("pool", "db", "priority", "test")...)
			}
			if got := codes(entries("pool", "db", "priority", "critical"), 0); got != "OK:150 " {
				t.Errorf("critical after a flood of 2,000 test requests: %s, want OK with 150 of 300 (test's 150 only)", got)
			}
		})
	}
}

// TestSlotTokenPath: an admitted acquire of a concurrency limit hands out a
// slot token, a denied one none; the release, with the token as its last
// entry (stripped before matching and counting), frees that request's slot
// and nothing the second time; a release without it frees nothing. A
// concurrency pool of 100 with test at 50%, driven the same way, never
// holds more than 50 test slots or 100 in all.
func TestSlotTokenPath(t *testing.T) {
	s := countingService(t, ratelimit.Options{CountDenied: true})
	stream := entries("streams", "alice")
	var tokens []string
	for range 20 {
		d := decideHits(t, s, 1, false, stream...)
		if (d.Code == ratelimit.OK) != (d.SlotToken != "") {
			t.Fatalf("acquire: %v with slot token %q, want a token exactly when admitted", d.Code, d.SlotToken)
		}
		if d.SlotToken != "" {
			tokens = append(tokens, d.SlotToken)
		} else {
			// Envoy's release for the denied request: no token.
			decideHits(t, s, 1, true, stream...)
		}
	}
	if len(tokens) != 5 {
		t.Fatalf("%d of 20 acquires admitted with denied requests released, want 5", len(tokens))
	}
	release := func(token string) uint64 {
		d := decideHits(t, s, 1, true, append(stream, descriptors.Entry{Key: ratelimit.SlotTokenKey, Value: token})...)
		if d.Statuses[0].Rule == nil || d.Statuses[0].Rule.FullKey != "edge.streams" {
			t.Fatalf("release with a token matched %v, want edge.streams", d.Statuses[0].Rule)
		}
		return decideHits(t, s, 0, false, stream...).Statuses[0].Result.Remaining
	}
	if got := release(tokens[0]); got != 1 {
		t.Fatalf("release of the first slot: %d free, want 1", got)
	}
	if got := release(tokens[0]); got != 1 {
		t.Fatalf("the same release again: %d free, want 1", got)
	}

	held := map[string]int{}
	for i := range 400 {
		class := []string{"test", "test", "test", "critical"}[i%4]
		d := decideHits(t, s, 1, false, entries("workers", "w", "priority", class)...)
		if d.Code == ratelimit.OK {
			held[class]++
		} else {
			decideHits(t, s, 1, true, entries("workers", "w", "priority", class)...)
		}
	}
	if held["test"] == 0 || held["test"] > 50 || held["test"]+held["critical"] != 100 {
		t.Fatalf("pool of 100, test at 50%%, denied requests released: held %v, want test at most 50 and 100 in all", held)
	}
}

// TestCountingDefaults: which limits the service's defaults reach.
func TestCountingDefaults(t *testing.T) {
	s := countingService(t, ratelimit.Options{Overdraw: true})
	// Overdraw by default: a report over the limit is admitted while under.
	for i, want := range []ratelimit.Code{ratelimit.OK, ratelimit.OK, ratelimit.OverLimit} {
		if d := decideHits(t, s, 15, false, entries("tenant", "o")...); d.Code != want {
			t.Fatalf("overdraw default, report %d of 15: %v, want %v", i, d.Code, want)
		}
	}
	// A pool's class never takes the default: the shed test request takes
	// nothing.
	for range 200 {
		decideHits(t, s, 1, false, entries("pool", "db", "priority", "test")...)
	}
	if d := decideHits(t, s, 0, false, entries("pool", "db", "priority", "critical")...); d.Statuses[0].Result.Remaining != 150 {
		t.Fatalf("critical after 200 test requests under the overdraw default: %d remaining, want 150", d.Statuses[0].Result.Remaining)
	}
}
