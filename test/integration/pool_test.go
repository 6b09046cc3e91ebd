package integration

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestPoolClasses runs the built binary on memory and on Redis with a pool
// of 1,000 a second shared by default (80%) and critical (100%): default
// offered 2,000 a second and critical 150 a second for 10 s from several
// callers, critical is admitted for at least 99% of what it offered,
// default while the pool (critical included) is within 800, and the pool,
// counting the admitted requests' times, is never above 1,000 in any window
// of one second; a shed request names default's ceiling. Then a pool of 50
// in flight: in flight never above 50, default admitted only below 40,
// critical never shed below 50. Then a reload lowers default to 50%.
func TestPoolClasses(t *testing.T) {
	config, err := os.ReadFile("testdata/pool/pool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "pool.yaml")
			if err := os.WriteFile(file, config, 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--config", dir, "--response-headers", "draft", "--store-timeout", "500ms", "--reload-debounce", "50ms"}
			if store == "redis" {
				args = append(args, "--redis-url", "redis://"+redistest.Addr(t)+"/0", "--redis-prefix", redistest.Prefix(t.Name()))
			}
			s := startSluice(t, args...)
			t.Run("rate pool under overload", func(t *testing.T) { poolOverload(t, s) })
			t.Run("concurrency pool", func(t *testing.T) { poolInFlight(t, s) })
			t.Run("reload lowers a ceiling", func(t *testing.T) {
				lowered := strings.Replace(string(config), "{value: default, ceiling: 80%}", "{value: default, ceiling: 50%}", 1)
				if err := os.WriteFile(file, []byte(lowered), 0o644); err != nil {
					t.Fatal(err)
				}
				var r *rlsv3.RateLimitResponse
				if !eventually(10*time.Second, 50*time.Millisecond, func() bool {
					r = s.call(t, "pool", []string{"pool", "checkout_db", "priority", "default"})
					return r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 500
				}) {
					t.Fatalf("no ceiling of 500 within 10 s of the edit: %v\n%s", r, s.Log())
				}
			})
		})
	}
}

// poolCaller sends one class's requests at a fixed pace, each at its
// scheduled time (at once when behind), and records the send times of the
// admitted ones.
type poolCaller struct {
	class    string
	every    time.Duration
	offered  int
	admitted []time.Time
	shed     *rlsv3.RateLimitResponse // the first shed answer
}

func (c *poolCaller) run(t *testing.T, s *sluice, start time.Time, d time.Duration) {
	req := request("pool", []string{"pool", "checkout_db", "priority", c.class})
	for at := start; at.Before(start.Add(d)); at = at.Add(c.every) {
		time.Sleep(time.Until(at))
		sent := time.Now()
		r, err := s.Client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Errorf("ShouldRateLimit(%s): %v", c.class, err)
			return
		}
		c.offered++
		if r.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			c.admitted = append(c.admitted, sent)
		} else if c.shed == nil {
			c.shed = r
		}
	}
}

func poolOverload(t *testing.T, s *sluice) {
	const d = 10 * time.Second
	var callers []*poolCaller
	for range 16 { // default: 16 x 125 a second
		callers = append(callers, &poolCaller{class: "default", every: 8 * time.Millisecond})
	}
	for range 3 { // critical: 3 x 50 a second
		callers = append(callers, &poolCaller{class: "critical", every: 20 * time.Millisecond})
	}
	start := time.Now().Add(50 * time.Millisecond)
	var wg sync.WaitGroup
	for i, c := range callers {
		wg.Go(func() { c.run(t, s, start.Add(time.Duration(i)*time.Millisecond/2), d) })
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	offered, admitted := map[string]int{}, map[string]int{}
	var times []time.Time
	var shed *rlsv3.RateLimitResponse
	for _, c := range callers {
		offered[c.class] += c.offered
		admitted[c.class] += len(c.admitted)
		times = append(times, c.admitted...)
		if c.class == "default" && shed == nil {
			shed = c.shed
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for hi, lo := 0, 0; hi < len(times); hi++ {
		for !times[lo].After(times[hi].Add(-time.Second)) {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	perSec := func(n int) float64 { return float64(n) / d.Seconds() }
	t.Logf("in %.1f s: default %d of %d admitted (%.0f/s), critical %d of %d (%.0f/s); at most %d in any 1 s window",
		elapsed, admitted["default"], offered["default"], perSec(admitted["default"]),
		admitted["critical"], offered["critical"], perSec(admitted["critical"]), most)
	if offered["default"] < 19_000 || offered["critical"] < 1_400 {
		t.Fatalf("offered default %d and critical %d, want about 20000 and 1500 (the callers fell behind)", offered["default"], offered["critical"])
	}
	if c, o := admitted["critical"], offered["critical"]; float64(c) < 0.99*float64(o) {
		t.Errorf("critical admitted %d of %d offered, want at least 99%%", c, o)
	}
	def, both := perSec(admitted["default"]), perSec(admitted["default"]+admitted["critical"])
	if def < 550 || def > 720 || both < 720 || both > 880 {
		t.Errorf("default admitted %.0f a second, %.0f with critical; want about 650 and 800 (default stops where the pool holds 800)", def, both)
	}
	if most > 1000 {
		t.Errorf("the pool admitted %d requests in one window of 1 s, over its 1000", most)
	}
	if shed == nil {
		t.Fatal("no default request shed")
	}
	h, st := headers(shed), shed.GetStatuses()[0]
	if st.GetCurrentLimit().GetRequestsPerUnit() != 800 || !strings.HasSuffix(h["RateLimit-Policy"], ";q=800;w=1") || h["Retry-After"] == "" {
		t.Errorf("shed default: current_limit %v, headers %v; want requests_per_unit 800, q=800 and a Retry-After", st.GetCurrentLimit(), h)
	}
}

// poolInFlight drives the pool of 50 in flight with acquires and releases,
// one call at a time, so that what is in flight before each call is known
// exactly: first mostly default, then mostly critical.
func poolInFlight(t *testing.T, s *sluice) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 50))
	type slot struct{ class, token string }
	var held []slot // the requests in flight: class and slot token
	shed := map[string]int{}
	// call acquires (token "") or releases, and returns whether it was OK
	// and the slot token handed out.
	call := func(class, token string, release bool) (bool, string) {
		req := request("pool", []string{"pool", "workers", "priority", class})
		req.Descriptors[0].IsNegativeHits = release
		if token != "" {
			req.Descriptors[0].Entries = append(req.Descriptors[0].Entries, &rlcommon.RateLimitDescriptor_Entry{Key: slotTokenKey, Value: token})
		}
		resp, err := s.Client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s, release %v): %v", class, release, err)
		}
		return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, resp.GetDynamicMetadata().GetFields()[slotTokenKey].GetStringValue()
	}
	for step := range 2000 {
		if len(held) > 0 && r.IntN(5) < 2 {
			i := r.IntN(len(held))
			if ok, _ := call(held[i].class, held[i].token, true); !ok {
				t.Fatalf("a release was refused")
			}
			held = slices.Delete(held, i, i+1)
			continue
		}
		class := "default"
		if r.IntN(4) == 0 || step >= 1000 && r.IntN(3) > 0 { // then mostly critical, to fill the pool
			class = "critical"
		}
		before := len(held)
		switch ok, token := call(class, "", false); {
		case ok && (before >= 50 || class == "default" && before >= 40):
			t.Fatalf("%s admitted with %d in flight", class, before)
		case !ok && (class == "critical" && before < 50 || class == "default" && before < 40):
			t.Fatalf("%s shed with %d in flight", class, before)
		case ok:
			held = append(held, slot{class, token})
		default:
			shed[class]++
			call(class, "", true) // Envoy releases a shed request too: that frees nothing
		}
	}
	t.Logf("shed: %v; %d in flight at the end", shed, len(held))
	if shed["default"] == 0 || shed["critical"] == 0 {
		t.Error("no default or no critical request shed: the run never reached default's ceiling of 40 or the pool's 50")
	}
}
