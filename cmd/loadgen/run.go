package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// tally is what one worker saw in the measured part of the run.
type tally struct {
	ok, over, unknown int64
	errs              map[codes.Code]int64
	msgs              map[string]int64 // errors by code and message, digits masked (see errorKind)
	secs              []Second         // with -per-second: outcomes by second of the measured run
	lat               hist
}

// worker builds and sends one caller's requests. Each worker owns its
// request message and random source, so requests need no locking and the
// message is reused once its call has returned.
type worker struct {
	o      *options
	client rlsv3.RateLimitServiceClient
	rng    *rand.Rand
	zipf   *rand.Zipf
	req    *rlsv3.RateLimitRequest
	t      tally
}

func newWorker(o *options, client rlsv3.RateLimitServiceClient, id int) *worker {
	w := &worker{o: o, client: client, rng: rand.New(rand.NewPCG(o.Seed, uint64(id)))}
	if o.Skew == "zipf" {
		w.zipf = rand.NewZipf(w.rng, o.ZipfS, 1, uint64(o.Keys-1))
	}
	w.req = &rlsv3.RateLimitRequest{Domain: o.Domain, HitsAddend: uint32(o.HitsAddend)}
	for i := range o.Descriptors {
		w.req.Descriptors = append(w.req.Descriptors, &rlcommon.RateLimitDescriptor{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: o.EntryKeys[i%len(o.EntryKeys)]}},
		})
	}
	w.t.errs = map[codes.Code]int64{}
	w.t.msgs = map[string]int64{}
	return w
}

func (w *worker) key() int {
	if w.zipf != nil {
		return int(w.zipf.Uint64())
	}
	return w.rng.IntN(w.o.Keys)
}

// fill chooses the values of the next request.
func (w *worker) fill() {
	hot := w.o.OverShare > 0 && w.rng.Float64() < w.o.OverShare
	for i, d := range w.req.Descriptors {
		if i == 0 && hot {
			d.Entries[0].Value = w.o.HotPrefix + strconv.Itoa(w.rng.IntN(w.o.HotKeys))
			continue
		}
		d.Entries[0].Value = "k" + strconv.Itoa(w.key())
	}
}

// call sends the current request; it records the outcome and the latency
// since due when measure is true.
//
// The call's deadline is -call-timeout alone, not the end of the run: a call
// sent in the last milliseconds of a run would otherwise carry a tiny
// grpc-timeout, which the server can see expire before the client does, and
// fail fast in a loop, counting thousands of DeadlineExceeded that say
// nothing about the server. A call in flight at the end finishes (calls
// take milliseconds); the run then ends.
func (w *worker) call(ctx context.Context, due time.Time, measure bool) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.o.CallTimeout)
	resp, err := w.client.ShouldRateLimit(cctx, w.req)
	cancel()
	done := time.Now()
	lat := done.Sub(due)
	if !measure {
		return
	}
	var sec *Second
	if w.o.PerSecond {
		i := max(int(done.Sub(w.o.measureFrom)/time.Second), 0)
		for len(w.t.secs) <= i {
			w.t.secs = append(w.t.secs, Second{})
		}
		sec = &w.t.secs[i]
	}
	if err != nil {
		if ctx.Err() != nil {
			return // the run ended during the call: not a server error
		}
		w.t.errs[status.Code(err)]++
		if sec != nil {
			sec.Errors++
		}
		if k := errorKind(err); w.t.msgs[k] > 0 || len(w.t.msgs) < maxErrorKinds {
			w.t.msgs[k]++
		}
	} else {
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK:
			w.t.ok++
			if sec != nil {
				sec.OK++
			}
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			w.t.over++
			if sec != nil {
				sec.OverLimit++
			}
		default:
			w.t.unknown++
		}
	}
	w.t.lat.record(lat)
}

// maxErrorKinds bounds the distinct error messages a worker keeps: a server
// that puts ever-changing text in its errors must not grow the report.
const maxErrorKinds = 16

// errorKind is err's code and message with every run of digits replaced by
// "#", so that errors of one cause (whose messages differ in durations or
// counts) are counted together and say where they came from.
func errorKind(err error) string {
	st := status.Convert(err)
	var b strings.Builder
	b.WriteString(st.Code().String())
	b.WriteString(": ")
	digits := false
	for _, r := range st.Message() {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}

// run dials o.Connections connections, drives the load and returns the
// report of the measured part. It returns an error only if it cannot start.
func run(ctx context.Context, o *options) (*Report, error) {
	conns, err := dialAll(ctx, o)
	for _, c := range conns {
		defer c.Close()
	}
	if err != nil {
		return nil, err
	}
	workers := make([]*worker, o.Concurrency)
	for i := range workers {
		workers[i] = newWorker(o, rlsv3.NewRateLimitServiceClient(conns[i%len(conns)]), i)
	}

	start := time.Now()
	measureFrom := start.Add(o.Warmup)
	o.measureFrom = measureFrom
	rctx, cancel := context.WithDeadline(ctx, measureFrom.Add(o.Duration))
	defer cancel()
	// sctx stops issuing new requests (at the deadline, or once -requests
	// have been issued); rctx bounds the calls themselves, so that calls in
	// flight when -requests is reached still complete and count.
	sctx, stopIssuing := context.WithCancel(rctx)
	defer stopIssuing()
	var issued atomic.Int64 // measured requests started, for -requests
	take := func(now time.Time) (measure, ok bool) {
		if now.Before(measureFrom) {
			return false, true
		}
		if o.Requests > 0 && issued.Add(1) > o.Requests {
			stopIssuing()
			return true, false
		}
		return true, true
	}
	drive(sctx, rctx, o, start, workers, take)
	end := time.Now()
	elapsed := end.Sub(measureFrom)
	if deadline, _ := rctx.Deadline(); end.After(deadline) {
		elapsed = deadline.Sub(measureFrom) // calls cut at the deadline are not counted
	}
	return newReport(o, workers, elapsed), nil
}

// dialAll opens o.Connections connections, spread over o.Targets in turn,
// and waits until each answers a first call (or fails), so that the first
// measured calls do not pay for the handshake. It returns the connections
// opened, also with an error; the caller closes them.
func dialAll(ctx context.Context, o *options) ([]*grpc.ClientConn, error) {
	addrs := make([]string, len(o.Targets))
	for i, t := range o.Targets {
		a, err := dialAddr(ctx, t)
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	var conns []*grpc.ClientConn
	for i := range o.Connections {
		addr := addrs[i%len(addrs)]
		c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return conns, fmt.Errorf("dial %s: %w", addr, err)
		}
		c.Connect()
		conns = append(conns, c)
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	probe := newWorker(o, rlsv3.NewRateLimitServiceClient(conns[0]), -1)
	for i, c := range conns {
		probe.client = rlsv3.NewRateLimitServiceClient(c)
		probe.fill()
		if _, err := probe.client.ShouldRateLimit(dctx, probe.req, grpc.WaitForReady(true)); err != nil && status.Code(err) != codes.InvalidArgument {
			return conns, fmt.Errorf("first call to %s: %w", addrs[i%len(addrs)], err)
		}
	}
	return conns, nil
}

// drive runs the workers until sctx ends: each in a closed loop, or, with
// o.Rate, each taking the due times schedule sends (open loop). take says
// whether a call at a time is measured and whether to make it at all; calls
// run under rctx.
func drive(sctx, rctx context.Context, o *options, start time.Time, workers []*worker, take func(time.Time) (bool, bool)) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if o.Rate == 0 {
		for _, w := range workers {
			wg.Go(func() {
				for sctx.Err() == nil {
					now := time.Now()
					measure, ok := take(now)
					if !ok {
						return
					}
					w.fill()
					w.call(rctx, now, measure)
				}
			})
		}
		return
	}
	due := make(chan time.Time, o.Concurrency)
	for _, w := range workers {
		wg.Go(func() {
			for t := range due {
				if sctx.Err() != nil {
					continue // drain
				}
				measure, ok := take(t)
				if !ok {
					continue
				}
				w.fill()
				w.call(rctx, t, measure)
			}
		})
	}
	schedule(sctx, start, o.Rate, due)
	close(due)
}

func schedule(ctx context.Context, start time.Time, rate float64, due chan<- time.Time) {
	interval := time.Duration(float64(time.Second) / rate)
	var i int64
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := time.Now()
		for {
			t := start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
			if t.After(now) {
				break
			}
			select {
			case due <- t:
				i++
			case <-ctx.Done():
				return
			}
		}
		next := start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
		timer.Reset(max(time.Until(next), min(interval, 50*time.Microsecond)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}
