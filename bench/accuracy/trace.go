package accuracy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// Kind is the traffic shape of a source.
type Kind uint8

const (
	// Steady sends Poisson arrivals at a constant rate between 0.2 and 3
	// times its limit.
	Steady Kind = iota
	// Bursty alternates bursts (2 to 20 times its limit's rate, lasting about
	// a quarter window) with idle periods (about two windows).
	Bursty
	// Idle sends Poisson arrivals at 0.5 to 1.5 times its limit's rate,
	// broken by idle gaps of several windows.
	Idle
	// Periodic sends at exact intervals, 1 to 1.2 times its limit's rate: a
	// well-behaved client slightly over its limit.
	Periodic
	// Quiet sends Poisson arrivals at 0.05 to 0.5 times its limit's rate:
	// most real clients, which rarely come near their limit.
	Quiet
	numKinds
)

// String returns the kind's name as the report prints it ("steady", "bursty", ...).
func (k Kind) String() string {
	switch k {
	case Steady:
		return "steady"
	case Bursty:
		return "bursty"
	case Idle:
		return "idle-gaps"
	case Periodic:
		return "periodic"
	case Quiet:
		return "quiet"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// TraceOptions describes a synthetic trace. The zero value of a field means
// its documented default.
type TraceOptions struct {
	// Seed makes the trace; the same options always give the same trace.
	Seed uint64
	// Requests is the total number of requests; sources are added until it
	// is reached (the last one cut short). Default 10,000,000.
	Requests int64
	// Duration is the most simulated time a source is active; each source is
	// active for a random span between a tenth of it and all of it.
	// Default 1 hour.
	Duration time.Duration
	// MaxPerSource caps one source's requests, so that no single fast source
	// dominates the trace. Default 200,000.
	MaxPerSource int
	// Limit, when its Window is set, is every source's limit (Compare only),
	// instead of one drawn from the mix.
	Limit limiter.Limit
}

func (o TraceOptions) withDefaults() TraceOptions {
	if o.Requests <= 0 {
		o.Requests = 10_000_000
	}
	if o.Duration <= 0 {
		o.Duration = time.Hour
	}
	if o.MaxPerSource <= 0 {
		o.MaxPerSource = 200_000
	}
	return o
}

// Source is one client of the trace with its own limit (one counter).
type Source struct {
	ID    int
	Kind  Kind
	Limit limiter.Limit
	Rate  float64 // mean offered rate while active, as a multiple of Requests/Window
}

// epochMs is the simulated start: a plain Unix time, so that the counter's
// windows are aligned to the epoch as in production, and sources start at
// random offsets from it.
const epochMs = 1_767_225_600_000 // 2026-01-01T00:00:00Z

// limits are the (requests, window) pairs sources draw from: Envoy-style
// per-second and per-minute limits, small and large.
var limits = []limiter.Limit{
	{Requests: 5, Window: time.Second},
	{Requests: 10, Window: time.Second},
	{Requests: 50, Window: time.Second},
	{Requests: 10, Window: time.Minute},
	{Requests: 20, Window: time.Minute},
	{Requests: 100, Window: time.Minute},
	{Requests: 1000, Window: time.Minute},
	{Requests: 100, Window: time.Hour},
}

// newSource draws source id's parameters from its own random stream.
func newSource(seed uint64, id int) (Source, *rand.Rand) {
	r := rand.New(rand.NewPCG(seed, uint64(id)))
	s := Source{ID: id, Kind: Kind(r.IntN(int(numKinds))), Limit: limits[r.IntN(len(limits))]}
	switch s.Kind {
	case Steady:
		s.Rate = 0.2 + 2.8*r.Float64()
	case Bursty:
		s.Rate = 2 + 18*r.Float64()
	case Idle:
		s.Rate = 0.5 + r.Float64()
	case Periodic:
		s.Rate = 1 + 0.2*r.Float64()
	case Quiet:
		s.Rate = 0.05 + 0.45*r.Float64()
	}
	return s, r
}

// times appends to buf the source's request times in Unix ms, in order, at
// most max of them, and returns buf.
func (s Source) times(r *rand.Rand, o TraceOptions, buf []int64, max int) []int64 {
	buf = buf[:0]
	w := float64(s.Limit.Window.Milliseconds())
	perMs := s.Rate * float64(s.Limit.Requests) / w // requests per ms while on
	span := float64(o.Duration.Milliseconds()) * (0.1 + 0.9*r.Float64())
	start := float64(epochMs) + r.Float64()*w*3 // random phase against the window grid
	end := start + span
	t := start
	exp := func(mean float64) float64 { return r.ExpFloat64() * mean }
	switch s.Kind {
	case Steady, Quiet:
		for t += exp(1 / perMs); t < end && len(buf) < max; t += exp(1 / perMs) {
			buf = append(buf, int64(t))
		}
	case Periodic:
		step := 1 / perMs
		for t += step; t < end && len(buf) < max; t += step {
			buf = append(buf, int64(t))
		}
	case Bursty, Idle:
		onMean, offMean := w/4, 2*w
		if s.Kind == Idle {
			onMean, offMean = 5*w, 3*w
		}
		for t < end && len(buf) < max {
			on := t + exp(onMean)
			for t += exp(1 / perMs); t < on && t < end && len(buf) < max; t += exp(1 / perMs) {
				buf = append(buf, int64(t))
			}
			t = math.Max(t, on) + exp(offMean)
		}
	}
	return buf
}
