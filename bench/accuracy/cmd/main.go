// Command accuracy prints the report of bench/accuracy: a deterministic
// synthetic trace replayed through Sluice's sliding window counter and an
// exact sliding log.
//
//	go run ./bench/accuracy/cmd -requests 10000000 -seed 1
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/bench/accuracy"
)

func main() {
	var o accuracy.TraceOptions
	flag.Uint64Var(&o.Seed, "seed", 1, "trace seed")
	flag.Int64Var(&o.Requests, "requests", 10_000_000, "total requests in the trace")
	flag.DurationVar(&o.Duration, "duration", 0, "most simulated time a source is active (0 = 1h)")
	flag.IntVar(&o.MaxPerSource, "max-per-source", 0, "most requests of one source (0 = 200000)")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	flag.Parse()
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
