package integration

import (
	"context"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// tenantsDownConfig is tenantsConfig's API by the hour (so a test does not
// straddle a window) under failure_mode local: while Redis is down the
// counters are decided in process, so what a decision answers depends on
// the tenant table alone.
const tenantsDownConfig = `domain: api
failure_mode: local
descriptors:
  - key: tenant
    tenants_from: api_tenants
    rate_limit: {unit: hour, requests_per_unit: 2}
    plans:
      pro: {rate_limit: {unit: hour, requests_per_unit: 5}}
`

// TestTenantTableRedisDown: with Redis down (stopped with SIGSTOP, or
// killed) while the binary serves a table in it, every decision is
// answered: a tenant whose row is cached and current keeps its plan without
// a read, a tenant whose row is due to be read again (after an import's
// reset) gets the plan last seen, and a tenant never seen gets the default
// plan; the failed reads are counted. The counters are decided in process
// (failure_mode local, one instance), starting from zero at the outage, so
// each tenant admits exactly its limit.
func TestTenantTableRedisDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		down func(t *testing.T, srv *redistest.Server)
	}{
		{"paused", func(t *testing.T, srv *redistest.Server) { srv.Pause(t); t.Cleanup(func() { srv.Resume(t) }) }},
		{"killed", func(t *testing.T, srv *redistest.Server) { srv.Stop() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			dir := t.TempDir()
			writeConfig(t, dir, tenantsDownConfig)
			url, prefix := "redis://"+srv.Addr()+"/0", redistest.Prefix(t.Name())
			for _, v := range []string{"acme", "beta"} {
				if out, ok := tenantsCLI(t, dir, url, prefix, "set", "api_tenants", v, "pro"); !ok {
					t.Fatalf("tenants set %s: %s", v, out)
				}
			}
			s := startFleet(t, 1, srv.Addr(), prefix, dir, "--debug-addr", "")[0]
			if got := admitted(t, s, "acme", 1) + admitted(t, s, "beta", 1); got != 2 {
				t.Fatalf("before the outage: %d of 2 admitted", got)
			}
			// An import's reset: both rows are to be read again; acme is,
			// beta is left due.
			rc := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
			defer rc.Close()
			if err := rc.XAdd(context.Background(), &goredis.XAddArgs{Stream: prefix + "tenants:changes",
				Values: []any{"t", "api_tenants", "reset", "1"}}).Err(); err != nil {
				t.Fatal(err)
			}
			waitMetric(t, s, "sluice_tenant_changes_total", func(v float64) bool { return v >= 1 })
			if got := admitted(t, s, "acme", 1); got != 1 {
				t.Fatalf("acme after the reset: %d of 1 admitted", got)
			}
			before := metrics(t, s)
			tc.down(t, srv)

			for _, c := range []struct {
				tenant   string
				calls    int
				want     int
				why      string
				newReads float64 // failed reads the tenant adds: 0 exactly, else at least this (one a second)
			}{
				{"acme", 7, 5, "pro, cached and current", 0},
				{"beta", 7, 5, "pro, the row last seen", 1},
				{"fresh", 4, 2, "the default plan", 1},
			} {
				errs0 := metrics(t, s)["sluice_tenant_read_errors_total"]
				ok, over := 0, 0
				for range c.calls {
					switch resp, err := s.Client.ShouldRateLimit(context.Background(), request("api", []string{"tenant", c.tenant})); {
					case err != nil:
						t.Fatalf("%s with Redis down: %v, want an answer", c.tenant, err)
					case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
						ok++
					default:
						over++
					}
				}
				if ok != c.want || over != c.calls-c.want {
					t.Errorf("%s with Redis down: %d OK, %d OVER_LIMIT of %d, want %d OK (%s)", c.tenant, ok, over, c.calls, c.want, c.why)
				}
				if got := metrics(t, s)["sluice_tenant_read_errors_total"] - errs0; got < c.newReads || (c.newReads == 0 && got != 0) {
					t.Errorf("%s: sluice_tenant_read_errors_total moved by %v, want %v", c.tenant, got, c.newReads)
				}
			}
			after := metrics(t, s)
			if d := after["sluice_local_decisions_total"] - before["sluice_local_decisions_total"]; d != 18 {
				t.Errorf("sluice_local_decisions_total moved by %v during the outage, want 18 (every decision)", d)
			}
			if strings.Contains(s.Log(), `"level":"error"`) {
				t.Errorf("an error was logged during the outage:\n%s", s.Log())
			}
		})
	}
}
