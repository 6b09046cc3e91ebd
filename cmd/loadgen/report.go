package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Report is the outcome of the measured part of a run. Its JSON form is
// what -json prints; durations are in microseconds, rates per second.
type Report struct {
	Target      string  `json:"target"`
	Mode        string  `json:"mode"` // "closed" or "open"
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"` // open loop target, requests/s
	Connections int     `json:"connections"`
	Descriptors int     `json:"descriptors"`
	Keys        int     `json:"keys"`
	Skew        string  `json:"skew"`
	ZipfS       float64 `json:"zipf_s,omitempty"`
	OverShare   float64 `json:"over_share"`
	Domain      string  `json:"domain"`
	HitsAddend  uint64  `json:"hits_addend,omitempty"`
	WarmupSec   float64 `json:"warmup_s"`
	ElapsedSec  float64 `json:"elapsed_s"` // measured wall time
	// MeasuredFrom is when the measured run began, Unix seconds: the
	// origin of PerSecond.
	MeasuredFrom float64 `json:"measured_from_unix"`
	// CallTimeoutMS is each call's gRPC deadline; the calls that ended
	// past it are Errors["DeadlineExceeded"].
	CallTimeoutMS float64 `json:"call_timeout_ms"`

	// Requests is every measured call that completed or failed; it equals
	// Decisions + ErrorTotal.
	Requests int64 `json:"requests"`
	// Decisions are the calls answered with a decision: OK + OverLimit +
	// Unknown. A call that failed (ErrorTotal) decided nothing and is not
	// one: against a server that is down, every call fails at once.
	Decisions int64 `json:"decisions"`
	// DecisionsPerSec is Decisions / ElapsedSec: ShouldRateLimit calls
	// answered per second (each decides Descriptors descriptors), and
	// ErrorsPerSec ErrorTotal / ElapsedSec.
	DecisionsPerSec   float64          `json:"decisions_per_s"`
	DescriptorsPerSec float64          `json:"descriptors_per_s"`
	ErrorsPerSec      float64          `json:"errors_per_s"`
	OK                int64            `json:"ok"`
	OverLimit         int64            `json:"over_limit"`
	Unknown           int64            `json:"unknown"` // overall_code UNKNOWN
	Errors            map[string]int64 `json:"errors"`  // by gRPC code name
	ErrorTotal        int64            `json:"error_total"`
	// ErrorKinds counts the errors by code and message, runs of digits
	// masked as "#" (each worker keeps at most maxErrorKinds kinds; the
	// rest are in Errors only): what the server said went wrong, and where.
	ErrorKinds map[string]int64 `json:"error_kinds,omitempty"`
	Latency    Latency          `json:"latency_us"`
	// PerSecond (with -per-second) is the measured calls by the second of
	// the measured run in which they ended: PerSecond[i] from i to i+1 s.
	PerSecond []Second `json:"per_second,omitempty"`
}

// Second is what the calls that ended in one second of the run got.
type Second struct {
	OK        int64 `json:"ok"`
	OverLimit int64 `json:"over_limit"`
	Errors    int64 `json:"errors"`
}

// Latency is the call latency distribution in microseconds: from the call's
// start (closed loop) or due time (open loop) to its answer.
type Latency struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func newReport(o *options, workers []*worker, elapsed time.Duration) *Report {
	r := &Report{
		Target: o.Target, Mode: "closed", Concurrency: o.Concurrency, Connections: o.Connections,
		Descriptors: o.Descriptors, Keys: o.Keys, Skew: o.Skew, OverShare: o.OverShare,
		Domain: o.Domain, HitsAddend: o.HitsAddend, WarmupSec: o.Warmup.Seconds(),
		ElapsedSec: elapsed.Seconds(), MeasuredFrom: float64(o.measureFrom.UnixNano()) / 1e9, CallTimeoutMS: float64(o.CallTimeout) / float64(time.Millisecond), Errors: map[string]int64{},
	}
	if o.Rate > 0 {
		r.Mode, r.Rate = "open", o.Rate
	}
	if o.Skew == "zipf" {
		r.ZipfS = o.ZipfS
	}
	var h hist
	for _, w := range workers {
		r.OK += w.t.ok
		r.OverLimit += w.t.over
		r.Unknown += w.t.unknown
		for c, n := range w.t.errs {
			r.Errors[c.String()] += n
			r.ErrorTotal += n
		}
		for k, n := range w.t.msgs {
			if r.ErrorKinds == nil {
				r.ErrorKinds = map[string]int64{}
			}
			r.ErrorKinds[k] += n
		}
		h.merge(&w.t.lat)
		for len(r.PerSecond) < len(w.t.secs) {
			r.PerSecond = append(r.PerSecond, Second{})
		}
		for i, c := range w.t.secs {
			r.PerSecond[i].OK += c.OK
			r.PerSecond[i].OverLimit += c.OverLimit
			r.PerSecond[i].Errors += c.Errors
		}
	}
	r.Decisions = r.OK + r.OverLimit + r.Unknown
	r.Requests = r.Decisions + r.ErrorTotal
	if s := elapsed.Seconds(); s > 0 {
		r.DecisionsPerSec = float64(r.Decisions) / s
		r.DescriptorsPerSec = r.DecisionsPerSec * float64(o.Descriptors)
		r.ErrorsPerSec = float64(r.ErrorTotal) / s
	}
	r.Latency = Latency{
		Min: us(time.Duration(h.min)), Mean: us(h.mean()),
		P50: us(h.quantile(0.50)), P90: us(h.quantile(0.90)), P99: us(h.quantile(0.99)),
		P999: us(h.quantile(0.999)), Max: us(time.Duration(h.max)),
	}
	return r
}

func (r *Report) writeText(w io.Writer) {
	mode := fmt.Sprintf("closed loop, %d callers", r.Concurrency)
	if r.Mode == "open" {
		mode = fmt.Sprintf("open loop, %.0f req/s, at most %d in flight", r.Rate, r.Concurrency)
	}
	skew := r.Skew
	if r.Skew == "zipf" {
		skew = fmt.Sprintf("zipf s=%g", r.ZipfS)
	}
	fmt.Fprintf(w, "target      %s (%d connections), domain %q, %s\n", r.Target, r.Connections, r.Domain, mode)
	fmt.Fprintf(w, "requests    %d descriptors each, %d keys %s, over-limit share %g\n", r.Descriptors, r.Keys, skew, r.OverShare)
	fmt.Fprintf(w, "measured    %.2fs after %.2fs warmup, each call's deadline %gms\n", r.ElapsedSec, r.WarmupSec, r.CallTimeoutMS)
	fmt.Fprintf(w, "decisions   %d (%.0f/s, %.0f descriptors/s) of %d calls\n", r.Decisions, r.DecisionsPerSec, r.DescriptorsPerSec, r.Requests)
	fmt.Fprintf(w, "outcomes    OK %d (%s), OVER_LIMIT %d (%s), UNKNOWN %d, errors %d (%s)\n",
		r.OK, pct(r.OK, r.Requests), r.OverLimit, pct(r.OverLimit, r.Requests), r.Unknown, r.ErrorTotal, pct(r.ErrorTotal, r.Requests))
	if len(r.Errors) > 0 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(r.Errors)) {
			parts = append(parts, fmt.Sprintf("%s %d", c, r.Errors[c]))
		}
		fmt.Fprintf(w, "errors      %.0f/s, not decisions: %s\n", r.ErrorsPerSec, strings.Join(parts, ", "))
		for _, k := range slices.Sorted(maps.Keys(r.ErrorKinds)) {
			fmt.Fprintf(w, "            %d x %s\n", r.ErrorKinds[k], k)
		}
	}
	l := r.Latency
	fmt.Fprintf(w, "latency µs  p50 %.0f  p90 %.0f  p99 %.0f  p99.9 %.0f  max %.0f  (min %.0f, mean %.0f)\n",
		l.P50, l.P90, l.P99, l.P999, l.Max, l.Min, l.Mean)
}

func pct(n, of int64) string {
	if of == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(of))
}
