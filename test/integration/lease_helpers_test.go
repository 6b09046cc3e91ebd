package integration

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The helpers here drive hot keys (leases, pkg/redis/lease.go) from
// outside: many callers on one descriptor across several instances, with
// every answer recorded with the times its call was sent and answered, so
// that what was admitted can be counted per window.

// answer is one call's outcome: when it was sent and answered, whether it
// was admitted, and the limit its status reported (0 when none).
type answer struct {
	start, end time.Time
	ok         bool
	err        bool
	limit      uint32
}

// hammer sends requests of one descriptor (kv, with hits_addend addend when
// not 0) from callers goroutines, caller i on instance i % len(ss), until
// ctx ends, and returns every answer.
func hammer(ctx context.Context, ss []*sluice, domain string, kv []string, callers int, addend uint32) []answer {
	var mu sync.Mutex
	var all []answer
	var wg sync.WaitGroup
	for i := range callers {
		s := ss[i%len(ss)]
		wg.Go(func() {
			var mine []answer
			req := request(domain, kv)
			req.HitsAddend = addend
			for ctx.Err() == nil {
				a := answer{start: time.Now()}
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				resp, err := s.Client.ShouldRateLimit(cctx, req)
				cancel()
				a.end = time.Now()
				if err != nil {
					a.err = true
					if ctx.Err() == nil {
						time.Sleep(time.Millisecond)
					}
				} else {
					a.ok = resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
					if st := resp.GetStatuses(); len(st) > 0 && st[0].GetCurrentLimit() != nil {
						a.limit = st[0].GetCurrentLimit().GetRequestsPerUnit()
					}
				}
				mine = append(mine, a)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all
}

// tallyAnswers counts the answers: admitted, denied, errors.
func tallyAnswers(as []answer) (ok, over, errs int) {
	for _, a := range as {
		switch {
		case a.err:
			errs++
		case a.ok:
			ok++
		default:
			over++
		}
	}
	return ok, over, errs
}

// maxPerWindow returns the most admitted answers that certainly fell in
// one window of length w aligned to the Unix epoch (sent and answered
// inside it), and that window's start.
func maxPerWindow(as []answer, w time.Duration) (most int, at time.Time) {
	by := map[int64]int{}
	for _, a := range as {
		if !a.ok {
			continue
		}
		i := a.start.UnixNano() / int64(w)
		if a.end.UnixNano()/int64(w) != i {
			continue
		}
		by[i]++
	}
	for i, n := range by {
		if n > most {
			most, at = n, time.Unix(0, i*int64(w))
		}
	}
	return most, at
}

// maxPerSubWindows returns the most admitted answers that certainly fell
// in n+1 consecutive sub-windows of length s (what a sliding window of n
// sub-windows bounds by its limit).
func maxPerSubWindows(as []answer, s time.Duration, n int) int {
	by := map[int64]int{}
	var idx []int64
	for _, a := range as {
		if !a.ok {
			continue
		}
		i := a.start.UnixNano() / int64(s)
		if a.end.UnixNano()/int64(s) != i {
			continue
		}
		if by[i] == 0 {
			idx = append(idx, i)
		}
		by[i]++
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	most := 0
	for _, i := range idx {
		sum := 0
		for j := i; j <= i+int64(n); j++ {
			sum += by[j]
		}
		most = max(most, sum)
	}
	return most
}

// writeConfig writes body as the only config file of dir, atomically.
func writeConfig(t *testing.T, dir, body string) {
	t.Helper()
	tmp := filepath.Join(dir, ".c.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
}

// stop sends sig to s and waits for it to exit, returning its exit error;
// the end-of-test SIGTERM then finds it gone.
func (s *sluice) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	s.cmd.Process.Signal(sig)
	select {
	case err := <-s.exited:
		s.exited <- nil
		return err
	case <-time.After(15 * time.Second):
		t.Fatalf("sluice did not exit after %v", sig)
		return nil
	}
}

// startFleet starts n instances on the Redis at addr with the config in
// dir and extra flags.
func startFleet(t *testing.T, n int, addr, prefix, dir string, extra ...string) []*sluice {
	t.Helper()
	var ss []*sluice
	for range n {
		args := append([]string{"--config", dir, "--redis-url", "redis://" + addr + "/0", "--redis-prefix", prefix,
			"--reload-debounce", "50ms"}, extra...)
		ss = append(ss, startSluice(t, args...))
	}
	return ss
}

var _ = redistest.Prefix
