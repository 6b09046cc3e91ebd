package accuracy

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// Counts tallies the decisions of one comparison.
type Counts struct {
	Requests int64 `json:"requests"`
	// Admitted is how many the sliding window counter admitted; Exact how
	// many the reference (the sliding log) admitted.
	Admitted int64 `json:"admitted"`
	Exact    int64 `json:"exact_admitted"`
	// Over counts requests the counter admitted and the log denied; Under
	// the reverse. Wrong = Over + Under.
	Over  int64 `json:"over"`
	Under int64 `json:"under"`
}

// Wrong is the number of decisions that differ.
func (c Counts) Wrong() int64 { return c.Over + c.Under }

func (c *Counts) add(o Counts) {
	c.Requests += o.Requests
	c.Admitted += o.Admitted
	c.Exact += o.Exact
	c.Over += o.Over
	c.Under += o.Under
}

// SourceResult is the replay of one source.
type SourceResult struct {
	Source
	// Stateful compares the counter with an independent sliding log.
	Stateful Counts `json:"stateful"`
	// Stateless compares the counter with the exact rule applied to the
	// counter's own admitted history.
	Stateless Counts `json:"stateless"`
	// CountAll compares the two when both count every request, denied ones
	// included (shadow-mode counting; the method of Cloudflare's
	// measurement): no state diverges, so it isolates the estimate's error
	// around the times a source crosses its limit. Admitted counts requests
	// under the limit.
	CountAll Counts `json:"count_all"`
	// Peak is the largest exact number of counter-admitted requests in any
	// sliding window (t-Window, t], in units of Limit.Requests.
	Peak float64 `json:"peak"`
}

// slidingLog is the exact limiter: the times of the last Limit admitted
// requests in a ring. A request at t is admitted iff fewer than Limit
// requests were admitted in (t-Window, t], that is iff the ring is not full
// or its oldest entry is at or before t-Window.
type slidingLog struct {
	ring    []int64
	head, n int
	w       int64
}

func newSlidingLog(l limiter.Limit) *slidingLog {
	return &slidingLog{ring: make([]int64, l.Requests), w: l.Window.Milliseconds()}
}

func (s *slidingLog) allow(t int64) bool {
	L := len(s.ring)
	switch {
	case L == 0:
		return false
	case s.n < L:
		s.ring[(s.head+s.n)%L] = t
		s.n++
		return true
	case s.ring[s.head] <= t-s.w:
		s.ring[s.head] = t
		s.head = (s.head + 1) % L
		return true
	}
	return false
}

// history is every admitted time still inside the window, oldest first.
type history struct {
	q     []int64
	start int
	w     int64
}

// inWindow drops the times at or before t-w and returns how many remain:
// the admitted requests in (t-w, t].
func (h *history) inWindow(t int64) int {
	for h.start < len(h.q) && h.q[h.start] <= t-h.w {
		h.start++
	}
	if h.start > 1024 && h.start*2 > len(h.q) {
		h.q = append(h.q[:0], h.q[h.start:]...)
		h.start = 0
	}
	return len(h.q) - h.start
}

// evaluate is limiter.Evaluate on the trace's limits, which are constants
// that Validate (trace.go): an error is a bug in this package.
func evaluate(t int64, hits []limiter.Hit, states []limiter.State) ([]limiter.Result, []limiter.State, bool) {
	rs, next, admitted, err := limiter.Evaluate(t, hits, states)
	if err != nil {
		panic(fmt.Sprintf("accuracy: %v", err))
	}
	return rs, next, admitted
}

// replay runs one source's times through the counter, an independent
// sliding log and the exact rule on the counter's history.
func replay(s Source, times []int64) SourceResult {
	res := SourceResult{Source: s}
	log := newSlidingLog(s.Limit)
	hist := history{w: s.Limit.Window.Milliseconds()}
	hits := []limiter.Hit{{Key: "source", Limit: s.Limit, Hits: 1}}
	counters := []limiter.State{{}}
	all := history{w: s.Limit.Window.Milliseconds()}
	shadow := []limiter.Hit{{Key: "source", Limit: s.Limit, Hits: 1, Shadow: true}}
	allCounters := []limiter.State{{}}
	L := int(s.Limit.Requests)
	peak := 0
	for _, t := range times {
		rs, nextAll, _ := evaluate(t, shadow, allCounters)
		allCounters[0] = nextAll[0]
		under, exactUnder := rs[0].Allowed, all.inWindow(t) < L
		all.q = append(all.q, t)
		res.CountAll.Requests++
		if under {
			res.CountAll.Admitted++
		}
		if exactUnder {
			res.CountAll.Exact++
		}
		switch {
		case under && !exactUnder:
			res.CountAll.Over++
		case !under && exactUnder:
			res.CountAll.Under++
		}

		_, next, admitted := evaluate(t, hits, counters)
		counters[0] = next[0]
		exact := log.allow(t)
		inWin := hist.inWindow(t)
		exactOnCounter := inWin < L

		res.Stateful.Requests++
		res.Stateless.Requests++
		if admitted {
			res.Stateful.Admitted++
			res.Stateless.Admitted++
			hist.q = append(hist.q, t)
			peak = max(peak, inWin+1)
		}
		if exact {
			res.Stateful.Exact++
		}
		if exactOnCounter {
			res.Stateless.Exact++
		}
		switch {
		case admitted && !exact:
			res.Stateful.Over++
		case !admitted && exact:
			res.Stateful.Under++
		}
		switch {
		case admitted && !exactOnCounter:
			res.Stateless.Over++
		case !admitted && exactOnCounter:
			res.Stateless.Under++
		}
	}
	if L > 0 {
		res.Peak = float64(peak) / float64(L)
	}
	return res
}

// Replay generates the trace o describes and replays every source. Sources
// are replayed in parallel (they share no counter), and the result is the
// same whatever the parallelism.
func Replay(o TraceOptions) *Report {
	o = o.withDefaults()
	start := time.Now()
	// Plan the sources first (sequentially, so the trace is deterministic),
	// then replay them on all CPUs.
	type job struct {
		s    Source
		seed uint64
		max  int
	}
	var jobs []job
	var total int64
	var buf []int64
	for id := 0; total < o.Requests; id++ {
		s, r := newSource(o.Seed, id)
		m := int(min(int64(o.MaxPerSource), o.Requests-total))
		buf = s.times(r, o, buf, m)
		total += int64(len(buf))
		jobs = append(jobs, job{s, o.Seed, m})
	}
	results := make([]SourceResult, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			var buf []int64
			for i := range next {
				s, r := newSource(jobs[i].seed, jobs[i].s.ID)
				buf = s.times(r, o, buf, jobs[i].max)
				results[i] = replay(s, buf)
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	return newReport(o, results, time.Since(start))
}
