// Command accuracy prints the report of bench/accuracy: a deterministic
// synthetic trace replayed through Sluice's sliding window counter and an
// exact sliding log.
//
//	go run ./bench/accuracy/cmd -requests 10000000 -seed 1
//
// With -compare it replays the trace through every algorithm instead (the
// table of BENCHMARKS.md), optionally with one limit for every source
// (-limit 100/1m) and the Redis cost of each on a running redis-server
// (-redis 127.0.0.1:6379):
//
//	go run ./bench/accuracy/cmd -compare -requests 2000000 -limit 100/1m -duration 20m -redis 127.0.0.1:6379
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"

	"github.com/sluicehq/sluice/bench/accuracy"
)

func main() {
	var o accuracy.TraceOptions
	flag.Uint64Var(&o.Seed, "seed", 1, "trace seed")
	flag.Int64Var(&o.Requests, "requests", 10_000_000, "total requests in the trace")
	flag.DurationVar(&o.Duration, "duration", 0, "most simulated time a source is active (0 = 1h)")
	flag.IntVar(&o.MaxPerSource, "max-per-source", 0, "most requests of one source (0 = 200000)")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	compare := flag.Bool("compare", false, "replay through every algorithm and print the comparison table")
	limit := flag.String("limit", "", "with -compare: every source's limit, as requests/window (100/1m)")
	redisAddr := flag.String("redis", "", "with -compare: a redis-server to measure CPU and memory on")
	flag.Parse()
	if *compare {
		if err := runCompare(o, *limit, *redisAddr, *asJSON); err != nil {
			fmt.Fprintf(os.Stderr, "accuracy: %v\n", err)
			os.Exit(1)
		}
		return
	}
	r := accuracy.Replay(o)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			fmt.Fprintf(os.Stderr, "accuracy: %v\n", err)
			os.Exit(1)
		}
		return
	}
	r.WriteText(os.Stdout)
}

func runCompare(o accuracy.TraceOptions, limit, redisAddr string, asJSON bool) error {
	if limit != "" {
		n, w, ok := strings.Cut(limit, "/")
		req, err1 := strconv.ParseUint(n, 10, 64)
		win, err2 := time.ParseDuration(w)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("-limit %q: want requests/window, like 100/1m", limit)
		}
		o.Limit = limiter.Limit{Requests: req, Window: win}
	}
	vs := accuracy.Variants()
	c := accuracy.Compare(o, vs)
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	c.WriteText(os.Stdout)
	if redisAddr == "" {
		return nil
	}
	l := o.Limit
	if l.Window == 0 {
		l = limiter.Limit{Requests: 100, Window: time.Minute}
	}
	return redisCost(os.Stdout, redisAddr, l, vs, 100, 200)
}
