//go:build leaseattack

package integration

// Exploratory load runs against hot-key leases; they print figures and
// check the fleet's admissions per window. Run with
//
//	go test -tags leaseattack -count=1 -v -run LeaseAttack ./test/integration/

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

func env(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func TestLeaseAttackFleetWindows(t *testing.T) {
	addr := redistest.Addr(t)
	dur := time.Duration(env("ATK_SECONDS", 5)) * time.Second
	type tc struct {
		name, rl string
		limit    int
		check    func(as []answer) (int, string)
	}
	perSec := func(as []answer) (int, string) {
		n, at := maxPerWindow(as, time.Second)
		return n, "calendar second " + at.Format("15:04:05")
	}
	cases := []tc{
		{"sliding50-second", "{unit: second, requests_per_unit: 2000}", 2000, func(as []answer) (int, string) {
			return maxPerSubWindows(as, 20*time.Millisecond, 50), "51 sub-windows of 20ms"
		}},
		{"sliding1-second", "{unit: second, requests_per_unit: 2000, sub_windows: 1}", 2000, perSec},
		{"fixed-second", "{unit: second, requests_per_unit: 2000, algorithm: fixed_window}", 2000, perSec},
		{"fixed-hour", "{unit: hour, requests_per_unit: 40000, algorithm: fixed_window}", 40000, nil},
		{"sliding50-minute", "{unit: minute, requests_per_unit: 40000}", 40000, nil},
		{"sliding1-hour", "{unit: hour, requests_per_unit: 40000, sub_windows: 1}", 40000, nil},
	}
	for _, n := range []int{2, 4} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%d/%s", n, c.name), func(t *testing.T) {
				dir := t.TempDir()
				writeConfig(t, dir, "domain: atk\ndescriptors:\n  - key: hot\n    rate_limit: "+c.rl+"\n")
				prefix := redistest.Prefix(t.Name())
				ss := startFleet(t, n, addr, prefix, dir)
				ctx, cancel := context.WithTimeout(context.Background(), dur)
				as := hammer(ctx, ss, "atk", []string{"hot", "v"}, 64, 0)
				cancel()
				ok, over, errs := tallyAnswers(as)
				t.Logf("%d calls in %v: OK %d, OVER_LIMIT %d, errors %d", len(as), dur, ok, over, errs)
				if c.check != nil {
					most, where := c.check(as)
					t.Logf("most admitted in %s: %d (limit %d)", where, most, c.limit)
					if most > c.limit {
						t.Errorf("OVER-ADMISSION: %d admitted in %s, limit %d", most, where, c.limit)
					}
					return
				}
				if ok > c.limit {
					t.Errorf("OVER-ADMISSION: %d admitted in one window, limit %d", ok, c.limit)
				}
				key := keyHolding(t, []string{addr}, prefix, "v")
				held := counted(t, []string{addr}, key)
				for _, s := range ss {
					if err := s.stop(t, syscall.SIGTERM); err != nil {
						t.Errorf("exit after SIGTERM: %v", err)
					}
				}
				after := counted(t, []string{addr}, key)
				t.Logf("counter: %d while running (after the load), %d after SIGTERM; admitted %d", held, after, ok)
				if after != uint64(ok) {
					t.Errorf("after SIGTERM the counter holds %d, admitted %d", after, ok)
				}
			})
		}
	}
}

func TestLeaseAttackReloadRace(t *testing.T) {
	addr := redistest.Addr(t)
	dir := t.TempDir()
	conf := func(n int) string {
		return "domain: atk\ndescriptors:\n  - key: hot\n    rate_limit: {unit: hour, algorithm: fixed_window, requests_per_unit: " + strconv.Itoa(n) + "}\n"
	}
	writeConfig(t, dir, conf(1000000))
	prefix := redistest.Prefix(t.Name())
	ss := startFleet(t, env("ATK_N", 1), addr, prefix, dir, append([]string{"--redis-lease-span", strconv.Itoa(env("ATK_SPAN_MS", 50)) + "ms"}, strings.Fields(os.Getenv("ATK_EXTRA"))...)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(env("ATK_SECONDS", 8))*time.Second)
	defer cancel()
	done := make(chan []answer)
	keys := env("ATK_KEYS", 8)
	for k := range keys {
		go func() {
			done <- hammer(ctx, ss, "atk", []string{"hot", "v" + strconv.Itoa(k)}, env("ATK_CALLERS", 64)/keys, 0)
		}()
	}
	lows := 0
	for i := 0; ctx.Err() == nil; i++ {
		time.Sleep(time.Duration(env("ATK_TOGGLE_MS", 700)) * time.Millisecond)
		if i%2 == 0 {
			writeConfig(t, dir, conf(1))
			lows++
		} else {
			writeConfig(t, dir, conf(1000000))
		}
	}
	var all []answer
	for range keys {
		all = append(all, <-done...)
	}
	okLow, low := 0, 0
	for _, a := range all {
		if a.limit == 1 {
			low++
			if a.ok {
				okLow++
			}
		}
	}
	ok, over, errs := tallyAnswers(all)
	t.Logf("%d calls, OK %d, OVER_LIMIT %d, errors %d; %d lowerings; %d answers under the limit of 1, %d of them OK",
		len(all), ok, over, errs, lows, low, okLow)
	if okLow > 0 {
		t.Errorf("OVER-ADMISSION: %d requests admitted under requests_per_unit 1 on counters already far over it", okLow)
	}
}

func fixedHour(n int) string {
	return "domain: atk\ndescriptors:\n  - key: hot\n    rate_limit: {unit: hour, algorithm: fixed_window, requests_per_unit: " + strconv.Itoa(n) + "}\n"
}

func TestLeaseAttackStop(t *testing.T) {
	addr := redistest.Addr(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			writeConfig(t, dir, fixedHour(1000000))
			prefix := redistest.Prefix(t.Name())
			ss := startFleet(t, 2, addr, prefix, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			as := hammer(ctx, ss, "atk", []string{"hot", "v"}, 64, 0)
			cancel()
			ok, over, errs := tallyAnswers(as)
			key := keyHolding(t, []string{addr}, prefix, "v")
			held := counted(t, []string{addr}, key)
			for _, s := range ss {
				s.stop(t, sig)
			}
			after := counted(t, []string{addr}, key)
			t.Logf("%v: OK %d, OVER %d, errors %d; counter %d before the signal, %d after", sig, ok, over, errs, held, after)
			if after < uint64(ok) {
				t.Errorf("OVER-ADMISSION: counter %d < admitted %d", after, ok)
			}
			if sig == syscall.SIGTERM && after != uint64(ok) && errs == 0 {
				t.Errorf("after SIGTERM counter %d != admitted %d", after, ok)
			}
		})
	}
}

func TestLeaseAttackRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	const limit = 30000
	writeConfig(t, dir, fixedHour(limit))
	prefix := redistest.Prefix(t.Name())
	ss := startFleet(t, 2, srv.Addr(), prefix, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	res := make(chan []answer)
	go func() { res <- hammer(ctx, ss, "atk", []string{"hot", "v"}, 64, 0) }()
	waitLeasing(t, ss)
	srv.Stop()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	as := <-res
	var okAfter, okBefore int
	for _, a := range as {
		if a.ok && a.start.After(back) {
			okAfter++
		} else if a.ok {
			okBefore++
		}
	}
	ok, over, errs := tallyAnswers(as)
	key := keyHolding(t, []string{srv.Addr()}, prefix, "v")
	held := counted(t, []string{srv.Addr()}, key)
	for _, s := range ss {
		s.stop(t, syscall.SIGTERM)
	}
	after := counted(t, []string{srv.Addr()}, key)
	t.Logf("OK %d (%d before the restart, %d sent after it), OVER %d, errors %d; fresh counter %d at the end, %d after SIGTERM",
		ok, okBefore, okAfter, over, errs, held, after)
	if okAfter > limit {
		t.Errorf("OVER-ADMISSION: %d admitted after Redis came back, limit %d", okAfter, limit)
	}
	if after < uint64(okAfter) {
		t.Errorf("fresh counter %d < admitted after the restart %d", after, okAfter)
	}
	for _, s := range ss {
		if strings.Contains(s.Log(), "panic") {
			t.Errorf("panic in log")
		}
	}
}

func TestLeaseAttackFlags(t *testing.T) {
	addr := redistest.Addr(t)
	dir := t.TempDir()
	writeConfig(t, dir, `domain: atk
descriptors:
  - key: hot
    value: shadow
    shadow_mode: true
    rate_limit: {unit: hour, algorithm: fixed_window, requests_per_unit: 1000}
  - key: hot
    value: quota
    quota_mode: true
    rate_limit: {unit: hour, algorithm: fixed_window, requests_per_unit: 1000}
  - key: hot
    value: overdraw
    rate_limit: {unit: hour, algorithm: fixed_window, requests_per_unit: 1000, overdraw: true}
  - key: hot
    rate_limit: {unit: hour, algorithm: fixed_window, requests_per_unit: 30000}
`)
	type run struct {
		name, value string
		addend      uint32
		flags       []string
	}
	for _, r := range []run{{"shadow", "shadow", 0, nil}, {"quota", "quota", 0, nil}, {"overdraw", "overdraw", 0, nil},
		{"addend3", "a3", 3, nil}, {"global-shadow", "gs", 0, []string{"--shadow-mode"}}} {
		t.Run(r.name, func(t *testing.T) {
			prefix := redistest.Prefix(t.Name())
			ss := startFleet(t, 2, addr, prefix, dir, r.flags...)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			as := hammer(ctx, ss, "atk", []string{"hot", r.value}, 64, r.addend)
			cancel()
			ok, over, errs := tallyAnswers(as)
			key := keyHolding(t, []string{addr}, prefix, r.value)
			for _, s := range ss {
				s.stop(t, syscall.SIGTERM)
			}
			after := counted(t, []string{addr}, key)
			t.Logf("%s: %d calls: OK %d, OVER %d, errors %d; counter after SIGTERM %d", r.name, len(as), ok, over, errs, after)
		})
	}
}

func TestLeaseAttackMixedAddend(t *testing.T) {
	addr := redistest.Addr(t)
	dir := t.TempDir()
	writeConfig(t, dir, fixedHour(1000000))
	prefix := redistest.Prefix(t.Name())
	ss := startFleet(t, 2, addr, prefix, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	r7 := make(chan []answer)
	go func() { r7 <- hammer(ctx, ss, "atk", []string{"hot", "v"}, 8, 7) }()
	a1 := hammer(ctx, ss, "atk", []string{"hot", "v"}, 56, 0)
	a7 := <-r7
	cancel()
	ok1, _, e1 := tallyAnswers(a1)
	ok7, _, e7 := tallyAnswers(a7)
	key := keyHolding(t, []string{addr}, prefix, "v")
	for _, s := range ss {
		s.stop(t, syscall.SIGTERM)
	}
	after := counted(t, []string{addr}, key)
	want := uint64(ok1 + 7*ok7)
	t.Logf("OK %d of 1 hit, %d of 7 (errors %d, %d): admitted hits %d; counter after SIGTERM %d (%d more)", ok1, ok7, e1, e7, want, after, int64(after)-int64(want))
	if after != want {
		t.Errorf("counter %d != admitted hits %d after SIGTERM", after, want)
	}
}

// waitLeasing waits until every instance of ss holds leased permits (its
// sluice_redis_leased_permits above 0): the load has made the key hot
// everywhere, so the fault that follows meets leases.
func waitLeasing(t *testing.T, ss []*sluice) {
	t.Helper()
	for i, s := range ss {
		if !eventually(5*time.Second, 20*time.Millisecond, func() bool { return metrics(t, s)["sluice_redis_leased_permits"] > 0 }) {
			t.Fatalf("instance %d holds no leased permits 5 s into the load", i)
		}
	}
}

func goroutines(t *testing.T, s *sluice) string {
	_, body := httpGet(t, "http://"+s.DebugAddr+"/debug/pprof/goroutine?debug=1")
	line, _, _ := strings.Cut(body, "\n")
	return line
}

func TestLeaseAttackRedisPause(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	writeConfig(t, dir, fixedHour(1000000))
	prefix := redistest.Prefix(t.Name())
	ss := startFleet(t, 2, srv.Addr(), prefix, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res := make(chan []answer)
	go func() { res <- hammer(ctx, ss, "atk", []string{"hot", "v"}, 64, 0) }()
	waitLeasing(t, ss)
	srv.Pause(t)
	time.Sleep(1000 * time.Millisecond)
	t.Logf("paused 1s: %s / %s", goroutines(t, ss[0]), goroutines(t, ss[1]))
	time.Sleep(1000 * time.Millisecond)
	t.Logf("paused 2s: %s / %s", goroutines(t, ss[0]), goroutines(t, ss[1]))
	srv.Resume(t)
	as := <-res
	t.Logf("after: %s / %s", goroutines(t, ss[0]), goroutines(t, ss[1]))
	ok, over, errs := tallyAnswers(as)
	key := keyHolding(t, []string{srv.Addr()}, prefix, "v")
	held := counted(t, []string{srv.Addr()}, key)
	for _, s := range ss {
		if err := s.stop(t, syscall.SIGTERM); err != nil {
			t.Errorf("exit: %v", err)
		}
		if strings.Contains(s.Log(), "panic") {
			t.Errorf("panic")
		}
	}
	after := counted(t, []string{srv.Addr()}, key)
	t.Logf("OK %d, OVER %d, errors %d; counter %d, after SIGTERM %d", ok, over, errs, held, after)
	if after < uint64(ok) {
		t.Errorf("OVER-ADMISSION: counter %d < admitted %d", after, ok)
	}
}

func TestLeaseAttackCluster(t *testing.T) {
	addrs := redistest.Cluster(t)
	dir := t.TempDir()
	const limit = 30000
	writeConfig(t, dir, fixedHour(limit))
	prefix := redistest.Prefix(t.Name())
	var ss []*sluice
	for range 2 {
		ss = append(ss, startSluice(t, "--config", dir, "--redis-cluster-addrs", strings.Join(addrs, ","), "--redis-prefix", prefix))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	as := hammer(ctx, ss, "atk", []string{"hot", "v"}, 64, 0)
	cancel()
	ok, over, errs := tallyAnswers(as)
	key := keyHolding(t, addrs, prefix, "v")
	held := counted(t, addrs, key)
	for _, s := range ss {
		s.stop(t, syscall.SIGTERM)
	}
	after := counted(t, addrs, key)
	t.Logf("OK %d, OVER %d, errors %d; counter %d, after SIGTERM %d", ok, over, errs, held, after)
	if ok > limit || after < uint64(ok) {
		t.Errorf("OVER-ADMISSION")
	}
}
