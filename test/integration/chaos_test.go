package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Bounds the chaos test holds sluice to, with --store-timeout 15ms.
//
// Latency is measured at the client, so it includes the scheduling delays of
// three busy processes (and of other test binaries) on a machine that may
// have 2 cores. Those delays add a tail that no deadline removes; a deadline
// that is not honoured shows differently: answers that wait for the 500 ms
// Redis socket timeouts or the 1 s dial timeout, for most calls, not a few.
// So the median is held to the store timeout plus a margin, the tail to a
// small share of answers over outageLatency, and every answer to
// outageCeiling, below the socket timeouts.
const (
	// outageMedian bounds the median latency during an outage.
	outageMedian = 50 * time.Millisecond
	// outageLatency is the latency at most outageTailShare of the answers
	// during an outage may exceed.
	outageLatency   = 100 * time.Millisecond
	outageTailShare = 0.02
	// outageCeiling bounds every answer during an outage.
	outageCeiling = 450 * time.Millisecond
	// decidedShare is the least share of answers (from 1 s after Redis is
	// back) that Redis must decide; the rest may be answered by the failure
	// mode when a loaded machine makes a call miss its 15 ms.
	decidedShare = 0.95
	// recoveryBound is how soon after Redis is back decisions must be
	// correct again: within one second.
	recoveryBound = time.Second
	// outageLength is how long each outage lasts: the load's answers in it
	// are what the bounds above are checked on.
	outageLength = 2 * time.Second
)

// chaosDomains are the domains of testdata/chaos, one per failure mode.
var chaosDomains = []string{"chaos_allow", "chaos_deny", "chaos_unset"}

// sample is one ShouldRateLimit answer under load.
type sample struct {
	domain     string
	start, end time.Time
	code       codes.Code
	overall    rlsv3.RateLimitResponse_Code
	remaining  uint32
	msg        string // the gRPC status message of an error
}

func (s sample) latency() time.Duration { return s.end.Sub(s.start) }

// healthy reports whether s is a decision Redis made: OK with the load
// limit's remaining count (the load never comes near its limit).
func (s sample) healthy() bool {
	return s.code == codes.OK && s.overall == rlsv3.RateLimitResponse_OK && s.remaining > 0
}

// degraded reports whether s is the answer of its domain's failure mode.
func (s sample) degraded() bool {
	switch s.domain {
	case "chaos_allow":
		return s.code == codes.OK && s.overall == rlsv3.RateLimitResponse_OK && s.remaining == 0
	case "chaos_deny":
		return s.code == codes.OK && s.overall == rlsv3.RateLimitResponse_OVER_LIMIT
	default:
		return s.code == codes.Unavailable
	}
}

func (s sample) String() string {
	return fmt.Sprintf("%s at %v: %v %q %v remaining %d in %v", s.domain, s.start.Format("15:04:05.000"), s.code, s.msg, s.overall, s.remaining, s.latency())
}

// load sends steady traffic from several goroutines, round robin over
// chaosDomains, and records every answer.
type load struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	all  []sample
}

func startLoad(s *sluice, workers int) *load {
	l := &load{stop: make(chan struct{})}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			key := "worker" + strconv.Itoa(w)
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				dom := chaosDomains[(i+w)%len(chaosDomains)]
				// The client's guard is far above every bound asserted, so
				// a stall shows as a latency, not as a client timeout.
				ctx, cancel := noDeadline(2 * time.Second)
				sm := sample{domain: dom, start: time.Now()}
				resp, err := s.Client.ShouldRateLimit(ctx, request(dom, []string{"load", key}))
				sm.end = time.Now()
				cancel()
				sm.code = status.Code(err)
				if err != nil {
					sm.msg = status.Convert(err).Message()
				}
				if err == nil && len(resp.GetStatuses()) == 1 {
					sm.overall = resp.GetOverallCode()
					sm.remaining = resp.GetStatuses()[0].GetLimitRemaining()
				}
				l.mu.Lock()
				l.all = append(l.all, sm)
				l.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	return l
}

// samples returns a copy of what was recorded so far.
func (l *load) samples() []sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}

func (l *load) finish() []sample {
	close(l.stop)
	l.wg.Wait()
	return l.samples()
}

// latencies summarises the latencies of ss: p50, p99 and max.
func latencies(ss []sample) (p50, p99, maxL time.Duration) {
	if len(ss) == 0 {
		return 0, 0, 0
	}
	ds := make([]time.Duration, len(ss))
	for i, s := range ss {
		ds[i] = s.latency()
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return q(0.50), q(0.99), ds[len(ds)-1]
}

// metrics scrapes /metrics and returns every sample line's value by its name
// and labels as written ("name{a=\"b\"}").
func metrics(t *testing.T, s *sluice) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

func failureAnswers(m map[string]float64, domain, mode string) float64 {
	return m[fmt.Sprintf("sluice_failure_mode_answers_total{domain=%q,mode=%q}", domain, mode)]
}

// readyz returns the status code of GET /readyz.
func readyz(t *testing.T, s *sluice) int {
	t.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + s.HTTPAddr + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// decided reports whether a call's answer came from the store, not from the
// failure mode: a decision carries the RateLimit headers (--response-headers
// draft), a failure-mode answer none.
func decided(resp *rlsv3.RateLimitResponse, err error) bool {
	return err == nil && headers(resp)["RateLimit"] != ""
}

// recovered sends a fresh probe key to domain every few milliseconds until
// the store decides it (remaining 4 of 5) and returns when that answer
// arrived. It fails t when none arrives within limit of from.
func recovered(t *testing.T, s *sluice, domain, name string, from time.Time, limit time.Duration) time.Time {
	t.Helper()
	var resp *rlsv3.RateLimitResponse
	var err error
	i := 0
	if !eventually(time.Until(from.Add(limit)), 5*time.Millisecond, func() bool {
		ctx, cancel := noDeadline(time.Second)
		defer cancel()
		resp, err = s.Client.ShouldRateLimit(ctx, request(domain, []string{"probe", fmt.Sprintf("%s-%d", name, i)}))
		i++
		return decided(resp, err)
	}) {
		t.Fatalf("%s: no decision %v after Redis came back (last answer %v, %v)", domain, limit, resp, err)
	}
	if got := resp.GetStatuses()[0].GetLimitRemaining(); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || got != 4 {
		t.Errorf("%s: first decision after recovery on a fresh key %v remaining %d, want OK remaining 4", domain, resp.GetOverallCode(), got)
	}
	return time.Now()
}

// countdown requires that a fresh probe key in domain counts down exactly,
// remaining 4, 3, 2, 1, 0, then OVER_LIMIT. A call the failure mode answered
// (the 15 ms store timeout can expire on a loaded machine) leaves its key's
// count unknown, so the countdown starts again on a new key; that may happen
// a few times, and the number of restarts is returned.
func countdown(t *testing.T, s *sluice, domain, name string) (restarts int) {
	t.Helper()
	for ; restarts < 5; restarts++ {
		key := fmt.Sprintf("%s-%d", name, restarts)
		ok := true
		for want := 4; want >= -1 && ok; want-- {
			ctx, cancel := noDeadline(time.Second)
			r, err := s.Client.ShouldRateLimit(ctx, request(domain, []string{"probe", key}))
			cancel()
			if !decided(r, err) {
				ok = false
				break
			}
			got := r.GetStatuses()[0].GetLimitRemaining()
			if want < 0 {
				if r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || got != 0 {
					t.Errorf("%s %s: 6th hit %v remaining %d, want OVER_LIMIT remaining 0", domain, key, r.GetOverallCode(), got)
				}
				continue
			}
			if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || got != uint32(want) {
				t.Errorf("%s %s: %v remaining %d, want OK remaining %d", domain, key, r.GetOverallCode(), got, want)
			}
		}
		if ok {
			return restarts
		}
	}
	t.Errorf("%s: %d countdowns cut by failure-mode answers with Redis up", domain, restarts)
	return restarts
}

// outage is one Redis outage under load, as the chaos test saw it.
type outage struct {
	name       string
	down, back time.Time // Redis stopped answering, Redis answered again
}

// TestChaos stops a private Redis under steady load, first with SIGSTOP
// (Redis hangs: connections open, no answers) then with SIGKILL (Redis gone:
// connections refused) followed by a restart on the same port, and checks
// that sluice answers every call within the store timeout plus a margin
// following each domain's failure mode, that /readyz says 503 during the
// outage, that the failure-mode metric counts the degraded answers while the
// log stays quiet, and that correct decisions resume within one second.
func TestChaos(t *testing.T) {
	srv := redistest.Start(t)
	s := startSluice(t, "--config", "test/integration/testdata/chaos",
		"--redis-url", "redis://"+srv.Addr()+"/0", "--redis-prefix", redistest.Prefix(t.Name()),
		"--store-timeout", "15ms", "--health-interval", "100ms")

	restarts := 0
	for _, d := range chaosDomains { // warm up: scripts loaded, connections open
		restarts += countdown(t, s, d, "warmup")
	}
	before := metrics(t, s)
	l := startLoad(s, 4)
	if !eventually(5*time.Second, 10*time.Millisecond, func() bool { return len(l.samples()) >= 100 }) {
		t.Fatalf("the load answered %d calls in 5 s before the outage, want 100", len(l.samples()))
	}

	var outages []outage

	// (a) SIGSTOP: Redis hangs.
	srv.Pause(t)
	down := time.Now()
	var got int
	if !eventually(time.Second, 20*time.Millisecond, func() bool { got = readyz(t, s); return got == http.StatusServiceUnavailable }) {
		t.Errorf("SIGSTOP: /readyz = %d during the outage, want 503", got)
	}
	time.Sleep(time.Until(down.Add(outageLength)))
	back := time.Now()
	srv.Resume(t)
	outages = append(outages, outage{"SIGSTOP", down, back})
	at := recovered(t, s, "chaos_unset", "stop", back, recoveryBound)
	t.Logf("SIGSTOP: first correct decision %v after SIGCONT", at.Sub(back).Round(time.Millisecond))
	for _, d := range chaosDomains {
		restarts += countdown(t, s, d, "after-stop")
	}
	if got := readyz(t, s); got != http.StatusOK {
		t.Errorf("SIGSTOP: /readyz = %d after recovery, want 200", got)
	}
	time.Sleep(1500 * time.Millisecond)

	// (b) SIGKILL: Redis gone, its counters lost, then restarted on the
	// same port.
	srv.Stop()
	down = time.Now()
	if !eventually(time.Second, 20*time.Millisecond, func() bool { got = readyz(t, s); return got == http.StatusServiceUnavailable }) {
		t.Errorf("SIGKILL: /readyz = %d during the outage, want 503", got)
	}
	time.Sleep(time.Until(down.Add(outageLength)))
	beforeStart := time.Now()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	back = time.Now()
	outages = append(outages, outage{"SIGKILL", down, beforeStart})
	t.Logf("SIGKILL: redis-server restarted in %v", back.Sub(beforeStart).Round(time.Millisecond))
	at = recovered(t, s, "chaos_unset", "kill", back, recoveryBound)
	t.Logf("SIGKILL: first correct decision %v after the restarted Redis answered PING", at.Sub(back).Round(time.Millisecond))
	for _, d := range chaosDomains {
		restarts += countdown(t, s, d, "after-kill")
	}
	if got := readyz(t, s); got != http.StatusOK {
		t.Errorf("SIGKILL: /readyz = %d after recovery, want 200", got)
	}
	time.Sleep(1500 * time.Millisecond)
	ss := l.finish()
	recoveries := []time.Time{outages[0].back, back}

	// Every answer is either a decision or the failure mode's answer; inside
	// an outage it is the failure mode's, answered in time; a second after
	// Redis is back it is a decision.
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	for _, sm := range ss {
		if !sm.healthy() && !sm.degraded() {
			report("answer neither decided nor by failure mode: %v", sm)
		}
	}
	for i, o := range outages {
		var in []sample
		after, afterDecided := 0, 0
		for _, sm := range ss {
			if sm.start.After(o.down.Add(10*time.Millisecond)) && sm.end.Before(o.back) {
				in = append(in, sm)
				if !sm.degraded() {
					report("%s: answer during the outage not by failure mode: %v", o.name, sm)
				}
				if sm.latency() > outageCeiling {
					report("%s: answer during the outage took %v, more than %v: %v", o.name, sm.latency(), outageCeiling, sm)
				}
			}
			if sm.start.After(recoveries[i].Add(recoveryBound)) && (i+1 == len(outages) || sm.end.Before(outages[i+1].down)) {
				after++
				if sm.healthy() {
					afterDecided++
				} else if after-afterDecided <= 5 {
					t.Logf("%s: failure-mode answer %v after Redis was back: %v", o.name, sm.start.Sub(recoveries[i]).Round(time.Millisecond), sm)
				}
			}
		}
		p50, p99, maxL := latencies(in)
		slow := 0
		perDomain := map[string]int{}
		for _, sm := range in {
			perDomain[sm.domain]++
			if sm.latency() > outageLatency {
				slow++
			}
		}
		t.Logf("%s outage: %d answers %v, latency p50 %v p99 %v max %v, %d over %v", o.name, len(in), perDomain,
			p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), maxL.Round(10*time.Microsecond), slow, outageLatency)
		t.Logf("%s: %d of %d answers from %v after recovery decided by Redis", o.name, afterDecided, after, recoveryBound)
		if len(in) < 100 {
			t.Errorf("%s: only %d answers during the outage: the load did not run", o.name, len(in))
		}
		if p50 > outageMedian {
			t.Errorf("%s: median latency during the outage %v, want at most %v", o.name, p50, outageMedian)
		}
		if float64(slow) > outageTailShare*float64(len(in)) {
			t.Errorf("%s: %d of %d answers during the outage took more than %v, want at most %.0f%%", o.name, slow, len(in), outageLatency, 100*outageTailShare)
		}
		if after < 50 || float64(afterDecided) < decidedShare*float64(after) {
			t.Errorf("%s: %d of %d answers from %v after recovery decided by Redis, want at least %.0f%%", o.name, afterDecided, after, recoveryBound, 100*decidedShare)
		}
	}
	if restarts > 0 {
		t.Logf("%d probe countdowns restarted after a failure-mode answer with Redis up", restarts)
	}
	p50, p99, maxL := latencies(ss)
	t.Logf("whole run: %d answers, latency p50 %v p99 %v max %v", len(ss), p50.Round(10*time.Microsecond),
		p99.Round(10*time.Microsecond), maxL.Round(10*time.Microsecond))

	after := metrics(t, s)
	var hist []string
	for k, v := range after {
		if (strings.Contains(k, "0.1\"") || strings.Contains(k, "Inf")) && strings.HasPrefix(k, "sluice_request_duration_seconds_bucket") || strings.HasPrefix(k, "sluice_store_call_duration_seconds_bucket") {
			hist = append(hist, fmt.Sprintf("%s %v", k, v))
		}
	}
	slices.Sort(hist)
	t.Logf("server-side latency:\n%s", strings.Join(hist, "\n"))
	for _, m := range []struct{ domain, mode string }{{"chaos_allow", "allow"}, {"chaos_deny", "deny"}, {"chaos_unset", "error"}} {
		b, a := failureAnswers(before, m.domain, m.mode), failureAnswers(after, m.domain, m.mode)
		t.Logf("sluice_failure_mode_answers_total{domain=%q,mode=%q}: %v -> %v", m.domain, m.mode, b, a)
		if a-b < 50 {
			t.Errorf("failure-mode answers for %s grew by %v, want the outage's answers counted", m.domain, a-b)
		}
	}
	if e := after[`sluice_store_calls_total{result="error"}`]; e < 150 {
		t.Errorf(`sluice_store_calls_total{result="error"} = %v, want every failed call counted`, e)
	}
	if n := strings.Count(s.Log(), "store failed"); n < 1 || n > 4 {
		t.Errorf(`%d "store failed" log lines over two outages, want 1..4 (throttled to one per 10 s)`, n)
	} else {
		t.Logf(`%d "store failed" log lines over two outages`, n)
	}
}

// noDeadline returns a context cancelled after guard that carries no
// deadline: a caller's deadline is the server's budget, so a call without
// one is bounded by --store-timeout, the bound these tests hold sluice to,
// while the guard keeps a hung server from hanging the test.
func noDeadline(guard time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t := time.AfterFunc(guard, cancel)
	return ctx, func() {
		t.Stop()
		cancel()
	}
}
