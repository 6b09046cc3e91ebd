package accuracy

import (
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// Variant is one algorithm, with its parameters, that Compare replays: Of
// turns a source's limit (requests per window) into the Limit it counts
// with.
type Variant struct {
	Name string
	Of   func(limiter.Limit) limiter.Limit
}

// Variants are the algorithms compared for accuracy: the sliding window with
// 1 (the classic counter), 6, 12, 20 and 60 sub-windows (and 25, 40 and 50,
// the other divisors of a second near them), then every other registered
// algorithm that counts requests (limiter.AlgorithmsWith: the token bucket
// with a burst of one window's requests, the fixed window, the sliding log).
func Variants() []Variant {
	sub := func(n uint8) Variant {
		return Variant{fmt.Sprintf("sliding_window N=%d", n), func(l limiter.Limit) limiter.Limit { l.SubWindows = n; return l }}
	}
	alg := func(a limiter.Algorithm) Variant {
		return Variant{a.String(), func(l limiter.Limit) limiter.Limit { l.Algorithm = a; return l }}
	}
	vs := []Variant{sub(1), sub(6), sub(12), sub(20), sub(25), sub(40), sub(50), sub(60)}
	// Every other algorithm that counts requests (not those in flight).
	for _, a := range limiter.AlgorithmsWith(func(t limiter.Traits) bool { return !t.SubWindows && !t.InFlight }) {
		vs = append(vs, alg(a))
	}
	return vs
}

// VariantResult is the replay of every compared source through one Variant,
// each against an independent exact sliding log (stateful, as in Replay).
type VariantResult struct {
	Variant  string `json:"variant"`
	Sources  int    `json:"sources"`
	Requests int64  `json:"requests"`
	// Admitted by the variant; Exact by the log; Over admitted by the
	// variant only, Under by the log only.
	Admitted int64 `json:"admitted"`
	Exact    int64 `json:"exact_admitted"`
	Over     int64 `json:"over"`
	Under    int64 `json:"under"`
	// MaxPeak is the largest exact count of variant-admitted requests in
	// any window (t-W, t] of any source, over its limit.
	MaxPeak float64 `json:"max_peak"`
}

// Comparison is the outcome of Compare.
type Comparison struct {
	Options TraceOptions    `json:"options"`
	Results []VariantResult `json:"results"`
	Skipped int             `json:"skipped_sources"` // windows not every variant divides
}

// Compare replays the trace o describes through every variant. Only sources
// whose window every variant can count are compared (60 sub-windows do not
// divide a second): with the default limits, the per-minute and per-hour
// ones. The result is deterministic.
func Compare(o TraceOptions, vs []Variant) *Comparison {
	o = o.withDefaults()
	c := &Comparison{Options: o}
	jobs := c.plan(vs)
	per := make([][]VariantResult, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			var buf []int64
			for i := range next {
				s, r := newSource(o.Seed, jobs[i].s.ID)
				s.Limit = o.limitOf(s.Limit)
				buf = s.times(r, o, buf, jobs[i].max)
				per[i] = make([]VariantResult, len(vs))
				for j, v := range vs {
					per[i][j] = replayVariant(v.Of(s.Limit), buf)
				}
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	c.Results = make([]VariantResult, len(vs))
	for j, v := range vs {
		res := VariantResult{Variant: v.Name}
		for i := range per {
			p := per[i][j]
			res.Sources++
			res.Requests += p.Requests
			res.Admitted += p.Admitted
			res.Exact += p.Exact
			res.Over += p.Over
			res.Under += p.Under
			res.MaxPeak = max(res.MaxPeak, p.MaxPeak)
		}
		c.Results[j] = res
	}
	return c
}

// compareJob is one source Compare replays, with its request cap.
type compareJob struct {
	s   Source
	max int
}

// plan draws the trace's sources in order (so that it is deterministic),
// counting in c.Skipped those whose limit some variant cannot count.
func (c *Comparison) plan(vs []Variant) []compareJob {
	o := c.Options
	var jobs []compareJob
	var total int64
	var buf []int64
	for id := 0; total < o.Requests; id++ {
		s, r := newSource(o.Seed, id)
		s.Limit = o.limitOf(s.Limit)
		m := int(min(int64(o.MaxPerSource), o.Requests-total))
		buf = s.times(r, o, buf, m)
		total += int64(len(buf))
		ok := true
		for _, v := range vs {
			ok = ok && v.Of(s.Limit).Validate() == nil
		}
		if !ok {
			c.Skipped++
			continue
		}
		jobs = append(jobs, compareJob{s, m})
	}
	return jobs
}

// replayVariant replays one source's times through l and an exact log.
func replayVariant(l limiter.Limit, times []int64) VariantResult {
	var res VariantResult
	exact := newSlidingLog(limiter.Limit{Requests: l.Requests, Window: l.Window})
	hist := history{w: l.Window.Milliseconds()}
	hits := []limiter.Hit{{Key: "source", Limit: l, Hits: 1}}
	states := []limiter.State{{}}
	peak := 0
	for _, t := range times {
		_, next, admitted := evaluate(t, hits, states)
		ex := exact.allow(t)
		inWin := hist.inWindow(t)
		res.Requests++
		if admitted {
			states[0] = next[0]
			res.Admitted++
			hist.q = append(hist.q, t)
			peak = max(peak, inWin+1)
		}
		if ex {
			res.Exact++
		}
		switch {
		case admitted && !ex:
			res.Over++
		case !admitted && ex:
			res.Under++
		}
	}
	if l.Requests > 0 {
		res.MaxPeak = float64(peak) / float64(l.Requests)
	}
	return res
}

// WriteText prints the comparison as a Markdown table.
func (c *Comparison) WriteText(w io.Writer) {
	o := c.Options
	var n int64
	if len(c.Results) > 0 {
		n = c.Results[0].Requests
	}
	fmt.Fprintf(w, "trace: seed %d, %d requests from %d sources (%d skipped: windows some variant cannot divide), each active up to %v\n\n",
		o.Seed, n, resultSources(c), c.Skipped, o.Duration)
	fmt.Fprintf(w, "| algorithm | worst admission in any window / limit | admitted / exact log's | wrong vs exact log | over | under |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range c.Results {
		fmt.Fprintf(w, "| %s | %.3f | %.2f%% | %.3f%% | %.3f%% | %.3f%% |\n", r.Variant, r.MaxPeak,
			100*share(r.Admitted, r.Exact), 100*share(r.Over+r.Under, r.Requests),
			100*share(r.Over, r.Requests), 100*share(r.Under, r.Requests))
	}
}

func resultSources(c *Comparison) int {
	if len(c.Results) == 0 {
		return 0
	}
	return c.Results[0].Sources
}

// limitOf is the limit a source counts with: o.Limit when set, else its own.
func (o TraceOptions) limitOf(l limiter.Limit) limiter.Limit {
	if o.Limit.Window > 0 {
		return o.Limit
	}
	return l
}
