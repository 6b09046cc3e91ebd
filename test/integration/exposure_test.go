package integration

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// noEvictionLine is the start-up warning about a Redis that refuses writes
// once full.
const noEvictionLine = "redis maxmemory-policy is noeviction"

// TestNoEvictionWarning: against a Redis with its default maxmemory-policy,
// noeviction (once full it refuses every write, so a flood of distinct
// values fails every decision), Sluice warns at start, naming the node;
// with an evicting policy it does not.
func TestNoEvictionWarning(t *testing.T) {
	r := redistest.Start(t)
	s := startSluice(t, "--config", "config", "--redis-url", "redis://"+r.Addr(), "--debug-addr", "")
	if !warned(s.Log(), noEvictionLine, `"redis_nodes":["`+r.Addr()+`"]`) {
		t.Errorf("Redis with noeviction: no warning %q naming %s:\n%s", noEvictionLine, r.Addr(), s.Log())
	}
	if _, err := redistest.Do(r.Addr(), "CONFIG", "SET", "maxmemory-policy", "allkeys-lru"); err != nil {
		t.Fatal(err)
	}
	lru := startSluice(t, "--config", "config", "--redis-url", "redis://"+r.Addr(), "--debug-addr", "")
	if strings.Contains(lru.Log(), noEvictionLine) {
		t.Errorf("Redis with allkeys-lru: warned all the same:\n%s", lru.Log())
	}
}

// warned reports whether log has a warning line holding msg and field.
func warned(log, msg, field string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, msg) && strings.Contains(line, field) {
			return true
		}
	}
	return false
}
