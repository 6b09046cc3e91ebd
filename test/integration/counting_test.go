package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// slotTokenKey is the entry key, and the dynamic metadata field, of a
// concurrency slot's token (ratelimit.SlotTokenKey).
const slotTokenKey = "sluice_slot"

// countingStores are the two stores each counting scenario runs on: Redis
// and memory.
func countingStores(t *testing.T) map[string][]string {
	return map[string][]string{
		"redis":  {"--redis-url", "redis://" + redistest.Addr(t) + "/0", "--redis-prefix", redistest.Prefix(t.Name()), "--store-timeout", "2s"},
		"memory": nil,
	}
}

// streamClient drives one descriptor of a concurrency limit as Envoy
// does: acquire on the request path; when admitted, hold the stream, then
// release with the slot token from the response's dynamic metadata; when
// denied, release all the same (Envoy's filter releases on every stream's
// end, denied or failed open), without a token, since the response held
// none.
type streamClient struct {
	s       *sluice
	entries []string
	gauges  []*gauge // the streams held now, counted in each
}

// gauge counts streams held at once and the most it saw.
type gauge struct{ now, peak atomic.Int64 }

func (g *gauge) add(n int64) {
	v := g.now.Add(n)
	for p := g.peak.Load(); v > p && !g.peak.CompareAndSwap(p, v); p = g.peak.Load() {
	}
}

func (c streamClient) descriptor(release bool, token string) *rlsv3.RateLimitRequest {
	req := request("counting", c.entries)
	d := req.Descriptors[0]
	d.HitsAddend = wrapperspb.UInt64(1)
	d.IsNegativeHits = release
	if token != "" {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: slotTokenKey, Value: token})
	}
	return req
}

// stream runs one stream and reports whether it was admitted.
func (c streamClient) stream(t *testing.T, hold time.Duration) bool {
	r, err := c.s.Client.ShouldRateLimit(context.Background(), c.descriptor(false, ""))
	if err != nil {
		t.Errorf("acquire: %v", err)
		return false
	}
	admitted := r.GetOverallCode() == rlsv3.RateLimitResponse_OK
	token := r.GetDynamicMetadata().GetFields()[slotTokenKey].GetStringValue()
	if admitted {
		for _, g := range c.gauges {
			g.add(1)
		}
		time.Sleep(hold)
		for _, g := range c.gauges {
			g.add(-1)
		}
	}
	if _, err := c.s.Client.ShouldRateLimit(context.Background(), c.descriptor(true, token)); err != nil {
		t.Errorf("release: %v", err)
	}
	return admitted
}

// TestConcurrencyReleasesOnlyItsOwnSlot is the release defect, closed: a
// concurrency limit of 5 with 20 clients, each releasing every stream as
// Envoy does (a denied one too, without a slot token), holds at most 5
// streams at once, and every slot is free at the end; a pool of 100 in
// flight with test at 50% holds at most 50 test streams and 100 in all.
// (Before, a release freed the oldest slot whoever took it: 20 streams of
// 5 at once, and 120 test streams with critical's 50.)
func TestConcurrencyReleasesOnlyItsOwnSlot(t *testing.T) {
	for name, args := range countingStores(t) {
		t.Run(name, func(t *testing.T) {
			s := startSluice(t, append([]string{"--config", "test/integration/testdata/counting"}, args...)...)
			var held gauge
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 20 {
				c := streamClient{s: s, entries: []string{"streams", "shared"}, gauges: []*gauge{&held}}
				wg.Go(func() {
					for range 25 {
						if c.stream(t, 2*time.Millisecond) {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("20 clients: %d of 500 streams admitted, at most %d at once", admitted.Load(), held.peak.Load())
			if held.peak.Load() > 5 || admitted.Load() < 25 {
				t.Errorf("20 clients on a limit of 5: at most %d streams at once (%d admitted), want at most 5 (and streams admitted)",
					held.peak.Load(), admitted.Load())
			}
			if got := s.call(t, "counting", []string{"streams", "shared"}).GetStatuses()[0].GetLimitRemaining(); got != 4 {
				t.Errorf("after every stream ended, an acquire leaves %d free, want 4 (all 5 were free)", got)
			}

			// 150 clients, 3 of 4 test, each holding its stream 100 ms: more
			// than the pool holds, even when calls are slow.
			var test, all gauge
			for i := range 150 {
				c := streamClient{s: s, entries: []string{"workers", "w", "priority", "test"}, gauges: []*gauge{&test, &all}}
				if i%4 == 3 {
					c.entries[3], c.gauges = "critical", []*gauge{&all}
				}
				wg.Go(func() {
					for range 10 {
						c.stream(t, 100*time.Millisecond)
					}
				})
			}
			wg.Wait()
			t.Logf("pool of 100: at most %d test streams and %d in all at once", test.peak.Load(), all.peak.Load())
			if test.peak.Load() > 50 || all.peak.Load() > 100 || all.peak.Load() <= 50 {
				t.Errorf("pool of 100, test at 50%%: up to %d test streams and %d in all at once, want test at most 50 and at most 100 in all (and the pool past test's 50: critical in its reserve)",
					test.peak.Load(), all.peak.Load())
			}
		})
	}
}

// TestLateRefund is the late refund, closed: on 3,000 a minute (the default
// sliding window, 50 sub-windows of 1.2 s) 3,000 hits, a refund of all of
// them 1.5 s later, and one hit: admitted, with 2,999 left. (Before, the
// refund lowered only the current sub-window, so it was lost and the hit
// was OVER_LIMIT.)
func TestLateRefund(t *testing.T) {
	for name, args := range countingStores(t) {
		t.Run(name, func(t *testing.T) {
			s := startSluice(t, append([]string{"--config", "test/integration/testdata/counting"}, args...)...)
			send := func(hits uint64, refund bool) *rlsv3.RateLimitResponse {
				t.Helper()
				req := request("counting", []string{"tokens", "t"})
				req.Descriptors[0].HitsAddend, req.Descriptors[0].IsNegativeHits = wrapperspb.UInt64(hits), refund
				r, err := s.Client.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatalf("hits %d, refund %v: %v", hits, refund, err)
				}
				return r
			}
			if r := send(3000, false); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("3000 hits: %v, want OK", r)
			}
			time.Sleep(1500 * time.Millisecond)
			send(3000, true)
			if r := send(1, false); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 2999 {
				t.Fatalf("one hit after a refund of all 3000, 1.5 s late: %v, want OK with 2999 remaining", r)
			}
		})
	}
}

// countingPeerConfig is the peer's counting scenarios: 20 a minute per
// tenant, and a pool of 1,000 an hour whose test class stops at 70%.
const countingPeerConfig = `domain: peer
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: app
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: pool
    value: db
    rate_limit: {unit: hour, requests_per_unit: 1000}
    classes:
      key: priority
      ceilings:
        - {value: critical, ceiling: 100%}
        - {value: test, ceiling: 70%}
`

// TestPeerCounting is the peer's counting under its environment: with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset, hits_addend 15 twice on 20
// a minute is OK, then OVER_LIMIT (the count after the hits passes the
// limit), and the denied 15 count (a check is OVER_LIMIT); a fresh key
// with 1,000,000 hits is OVER_LIMIT; a flood of 2,000 test-class requests
// on a pool of 1,000 (test at 70%) leaves critical its 300: 300 of 300
// admitted. The start-up lines say which counting is in force. (Before,
// every rule overdrew: OK, OK; OK; and the shed flood counted, leaving
// critical 0 of 300.)
func TestPeerCounting(t *testing.T) {
	redisSrv := redistest.Start(t)
	s := startPeer(t, peerEnv(t, countingPeerConfig, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisSrv.Addr(), "SLUICE_STORE_TIMEOUT=2s"))
	if applied, _ := startupSettings(t, s); !strings.Contains(strings.Join(applied, "\n"), "--count-denied=true (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset") {
		t.Errorf("the start-up line lacks --count-denied=true from STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset: %q", applied)
	}
	if !strings.Contains(s.Log(), `"counting":"count-denied (--count-denied, envoyproxy/ratelimit's counting)`) {
		t.Errorf("no start-up line says the counting in force is count-denied:\n%s", s.Log())
	}
	send := func(hits uint64, kv ...string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		req := request("peer", kv)
		req.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
		r, err := s.Client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("%v hits %d: %v", kv, hits, err)
		}
		return r.GetOverallCode()
	}
	codes := func(kv []string, hits ...uint64) string {
		var out []string
		for _, n := range hits {
			out = append(out, send(n, kv...).String())
		}
		return strings.Join(out, " ")
	}
	if got, want := codes([]string{"tenant", "a"}, 15, 15, 0), "OK OVER_LIMIT OVER_LIMIT"; got != want {
		t.Errorf("20 a minute: hits_addend 15, 15, then a check = %s, want %s", got, want)
	}
	if got, want := codes([]string{"tenant", "b"}, 1_000_000, 0), "OVER_LIMIT OVER_LIMIT"; got != want {
		t.Errorf("a fresh key: 1,000,000 hits, then a check = %s, want %s", got, want)
	}
	// Two limits in one request, the second over from the 11th on: the
	// first counts every request all the same (the over-limit cache, on by
	// default, never answers a request whose hits count when denied).
	for i := range 15 {
		r, err := s.Client.ShouldRateLimit(context.Background(), request("peer", []string{"user", "u"}, []string{"app", "a"}))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.GetStatuses()[0].GetLimitRemaining(), uint32(20-(i+1)); got != want || (i >= 10) != (r.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT) {
			t.Fatalf("request %d of [user], [app]: %v with %d remaining on user, want %d (counted), OVER_LIMIT from the 11th", i+1, r.GetOverallCode(), got, want)
		}
	}
	for range 2000 {
		send(1, "pool", "db", "priority", "test")
	}
	admitted := 0
	for range 300 {
		if send(1, "pool", "db", "priority", "critical") == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != 300 {
		t.Errorf("after a flood of 2,000 test requests: critical admitted %d of 300, want all 300", admitted)
	}
}

// TestClassesRefuseOverdraw: a pool's classes on a rate_limit with
// overdraw: true is a config error at the overdraw key, with the reason, so
// that a low class's reports cannot take the reserve of the classes above
// it. (Before, it was accepted: a test-class report of 60,000 on 100,000 an
// hour left critical below its reserve.)
func TestClassesRefuseOverdraw(t *testing.T) {
	dir := t.TempDir()
	config := `domain: budget
descriptors:
  - key: pool
    value: tokens
    rate_limit: {unit: hour, requests_per_unit: 100000, overdraw: true}
    classes:
      key: priority
      ceilings:
        - {value: critical, ceiling: 100%}
        - {value: test, ceiling: 50%}
`
	if err := os.WriteFile(filepath.Join(dir, "budget.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "check", dir).CombinedOutput()
	want := fmt.Sprintf("%s:5:57: descriptors[0].rate_limit.overdraw: overdraw with classes", filepath.Join(dir, "budget.yaml"))
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("sluice check of classes with overdraw: %v\n%s\nwant a failure naming %q", err, out, want)
	}
}
