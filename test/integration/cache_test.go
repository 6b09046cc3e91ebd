package integration

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// cacheLimit is the limit of cacheConfig: small enough that a fleet run of
// a few seconds passes it on a loaded machine too (a few hundred calls a
// second), so the runs below end denying.
const cacheLimit = 1000

// cacheConfig is one limit of cacheLimit hits an hour, cached or not: an
// hour, so that none of the window frees up during a run of a few seconds.
func cacheConfig(cache bool) string {
	c := "false"
	if cache {
		c = "true"
	}
	return "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + strconv.Itoa(cacheLimit) + ", cache: " + c + "}\n"
}

// fleetRun hammers one key on every instance of ss for d, 2 callers each,
// and returns every answer and the calls per second the fleet made.
func fleetRun(ss []*sluice, d time.Duration) (all []answer, rate float64) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	all = hammer(ctx, ss, "c", []string{"k", "v"}, 2*len(ss), 0)
	return all, float64(len(all)) / time.Since(start).Seconds()
}

// TestCacheFleetOverAdmissionBounded: three instances hammering one cached
// key admit at most the limit plus the bound of docs/configuration.md
// (the others' rate over the time a count is stale plus a sync period),
// taken here at its loosest: the whole fleet's rate over two periods. The
// cache decided some of them in process.
func TestCacheFleetOverAdmissionBounded(t *testing.T) {
	addr := redistest.Addr(t)
	dir := t.TempDir()
	writeConfig(t, dir, cacheConfig(true))
	ss := startFleet(t, 3, addr, redistest.Prefix(t.Name()), dir, "--store-timeout", "1s", "--debug-addr", "")
	all, rate := fleetRun(ss, 4*time.Second)
	ok, _, errs := tallyAnswers(all)
	bound := int(rate * 0.2)
	var decided float64
	for _, s := range ss {
		decided += metrics(t, s)["sluice_cache_decisions_total"]
	}
	t.Logf("%d calls (%.0f/s), %d admitted of a limit of %d (bound +%d), %d errors, %.0f decided in process",
		len(all), rate, ok, cacheLimit, bound, errs, decided)
	if errs > 0 {
		t.Fatalf("%d calls failed", errs)
	}
	if len(all) <= cacheLimit+bound {
		t.Fatalf("%d calls, want more than the limit and its bound (%d) for the run to end denying", len(all), cacheLimit+bound)
	}
	if ok < cacheLimit || ok > cacheLimit+bound {
		t.Errorf("admitted %d, want %d to %d", ok, cacheLimit, cacheLimit+bound)
	}
	if decided == 0 {
		t.Error("sluice_cache_decisions_total is 0 on every instance: the cache decided nothing")
	}
}

// TestCacheOffExact: the same run without the cache never admits more
// than the limit. It may admit a few less: the key is hot, so leased, and
// permits an instance holds unspent when the run ends are lost to the
// others until given back (pkg/redis/lease.go); 2999 of 3000 was seen.
func TestCacheOffExact(t *testing.T) {
	addr := redistest.Addr(t)
	dir := t.TempDir()
	writeConfig(t, dir, cacheConfig(false))
	ss := startFleet(t, 3, addr, redistest.Prefix(t.Name()), dir, "--store-timeout", "1s", "--debug-addr", "")
	all, rate := fleetRun(ss, 3*time.Second)
	ok, _, errs := tallyAnswers(all)
	t.Logf("%d calls (%.0f/s), %d admitted, %d errors", len(all), rate, ok, errs)
	if errs > 0 {
		t.Fatalf("%d calls failed", errs)
	}
	if len(all) <= cacheLimit {
		t.Fatalf("%d calls, want more than the limit (%d) for the run to end denying", len(all), cacheLimit)
	}
	if ok > cacheLimit || ok < cacheLimit-cacheLimit/30 {
		t.Errorf("admitted %d, want at most %d (and not far under it)", ok, cacheLimit)
	}
	if d := metrics(t, ss[0])["sluice_cache_decisions_total"]; d != 0 {
		t.Errorf("sluice_cache_decisions_total = %v with the cache off, want 0", d)
	}
}

// outageConfig is a limit of 600 hits an hour under failure mode mode.
func outageConfig(mode string) string {
	return "domain: c\nfailure_mode: " + mode + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 600}\n"
}

// waitMetric waits (at most 10 s) until want says yes to s's metric name.
func waitMetric(t *testing.T, s *sluice, name string, want func(float64) bool) {
	t.Helper()
	var v float64
	if !eventually(10*time.Second, 50*time.Millisecond, func() bool { v = metrics(t, s)[name]; return want(v) }) {
		t.Fatalf("%s = %v after 10 s", name, v)
	}
}

// outageRun stops Redis (SIGSTOP) under load on each instance of ss and
// returns each instance's answers during the outage; Redis is resumed
// before it returns.
func outageRun(t *testing.T, srv *redistest.Server, ss []*sluice) [][]answer {
	srv.Pause(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	per := make([][]answer, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() { per[i] = hammer(ctx, []*sluice{s}, "c", []string{"k", "v"}, 2, 0) })
	}
	wg.Wait()
	cancel()
	srv.Resume(t)
	return per
}

// TestFailureModeLocalOutage: with failure_mode local, three instances
// whose heartbeats counted three answer every call while Redis is stopped,
// each admitting at most its share of the limit (600/3), and go back to
// Redis once it resumes.
func TestFailureModeLocalOutage(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	writeConfig(t, dir, outageConfig("local"))
	ss := startFleet(t, 3, srv.Addr(), redistest.Prefix(t.Name()), dir, "--debug-addr", "")
	for _, s := range ss {
		waitMetric(t, s, "sluice_live_instances", func(v float64) bool { return v == 3 })
		s.call(t, "c", []string{"k", "v"}) // warm
	}
	per := outageRun(t, srv, ss)
	resumed := time.Now()
	for i, as := range per {
		ok, over, errs := tallyAnswers(as)
		t.Logf("instance %d during the outage: %d admitted, %d over the limit, %d errors", i, ok, over, errs)
		if errs > 0 {
			t.Errorf("instance %d: %d errors during the outage, want 0", i, errs)
		}
		if ok > 200 {
			t.Errorf("instance %d admitted %d during the outage, want at most its share, 200", i, ok)
		}
		if ok+over > 0 && metrics(t, ss[i])["sluice_local_decisions_total"] == 0 {
			t.Errorf("instance %d: sluice_local_decisions_total is 0 after the outage", i)
		}
	}
	for _, s := range ss {
		// Each call tries Redis first; the first it answers ends the local
		// mode.
		waitMetric(t, s, "sluice_local_since_seconds", func(v float64) bool {
			s.call(t, "c", []string{"k", "v"})
			return v == 0
		})
	}
	t.Logf("every instance back on Redis %v after SIGCONT", time.Since(resumed).Round(time.Millisecond))
}

// TestFailureModeErrorOutage: the same outage with failure_mode error
// answers UNAVAILABLE, as before.
func TestFailureModeErrorOutage(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	writeConfig(t, dir, outageConfig("error"))
	ss := startFleet(t, 1, srv.Addr(), redistest.Prefix(t.Name()), dir, "--debug-addr", "")
	ss[0].call(t, "c", []string{"k", "v"})
	per := outageRun(t, srv, ss)
	ok, _, errs := tallyAnswers(per[0])
	t.Logf("during the outage: %d admitted, %d errors", ok, errs)
	if errs == 0 || ok > 0 {
		t.Errorf("failure_mode error during the outage: %d errors, %d admitted; want only errors", errs, ok)
	}
}
