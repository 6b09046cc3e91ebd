// Command loadgen drives a Sluice (or any envoy.service.ratelimit.v3) server
// with ShouldRateLimit calls over gRPC, as Envoy would, and reports
// decisions per second, OK and OVER_LIMIT counts, errors by gRPC code and
// the latency distribution, as text or JSON.
//
// It runs in one of two modes. Closed loop (the default): -concurrency
// callers each send a request as soon as their previous one is answered, so
// the rate is whatever the server sustains. Open loop (-rate R): requests are
// due at R per second whatever the server does, at most -concurrency in
// flight; latency is measured from the time a request was due, not from the
// time it was sent, so a server that falls behind shows its queueing in the
// percentiles (no coordinated omission).
//
// Each request carries -descriptors descriptors; descriptor i has one entry
// whose key is the i-th of -entry-keys (cycling) and whose value is
// "k<n>", n drawn from -keys values with -skew. A share -over-share of the
// requests instead send "<hot-prefix><n>" (n among -hot-keys values) in
// their first descriptor: with bench/loadtest.yaml those few hot values are
// limited to 10 a second, so that traffic is almost all OVER_LIMIT, while the
// "k<n>" values fall under a limit no run reaches.
//
// loadgen only targets loopback addresses (127.0.0.0/8, ::1, localhost) and
// always stops by itself: after -warmup plus -duration (together at most 10
// minutes), after -requests measured requests, or on SIGINT. Exit codes: 0 ok,
// 1 the run could not start, 2 bad usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// maxRunTime caps warmup plus duration, so a forgotten loadgen stops.
const maxRunTime = 10 * time.Minute

// options is one parsed, validated command line.
type options struct {
	Target      string        // host:port[,host:port...] as given, loopback only
	Targets     []string      // Target split: connection i goes to Targets[i%len]
	Concurrency int           // closed loop callers, or most in flight in open loop
	Rate        float64       // requests/s; 0 means closed loop
	Connections int           // gRPC client connections, used round robin
	Duration    time.Duration // measured time, after Warmup
	Requests    int64         // measured requests; 0 means no cap
	Warmup      time.Duration // unmeasured time before Duration
	CallTimeout time.Duration // gRPC deadline of each call
	Descriptors int           // descriptors per request
	EntryKeys   []string      // entry key of descriptor i is EntryKeys[i%len]
	Keys        int           // distinct values per entry key
	Skew        string        // uniform or zipf
	ZipfS       float64       // Zipf exponent, > 1
	OverShare   float64       // share of requests on the hot values, 0..1
	HotKeys     int           // distinct hot values
	HotPrefix   string        // prefix of hot values
	Domain      string
	HitsAddend  uint64 // request-level hits_addend; 0 leaves it unset (1)
	Seed        uint64
	JSON        bool
	PerSecond   bool      // report outcomes by second of the measured run
	measureFrom time.Time // start of the measured run, set by run
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli runs one invocation and returns the exit code.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 2
	}
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 1
	}
	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "loadgen: write report: %v\n", err)
			return 1
		}
		return 0
	}
	rep.writeText(stdout)
	return 0
}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Target, "target", "127.0.0.1:8081", "gRPC address of the rate-limit service, or several separated by commas (connections go round robin to them): loopback only (127.0.0.0/8, ::1, localhost)")
	fs.IntVar(&o.Concurrency, "concurrency", 16, "closed loop: concurrent callers; open loop: most requests in flight")
	fs.Float64Var(&o.Rate, "rate", 0, "open loop: requests per second (0 = closed loop)")
	fs.IntVar(&o.Connections, "connections", 1, "gRPC client connections, used round robin; each first sends one unreported call, which the service counts (so a run against a limit of N reports at most N minus that many OK)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "measured run time after the warmup (warmup+duration at most 10m)")
	fs.Int64Var(&o.Requests, "requests", 0, "stop after this many measured requests (0 = no cap; without -duration the run is capped at 10m)")
	fs.DurationVar(&o.Warmup, "warmup", 0, "unmeasured time before the measured run")
	fs.DurationVar(&o.CallTimeout, "call-timeout", 5*time.Second, "gRPC deadline of each call, as Envoy's filter timeout (20ms by default) sets it; a call past it counts as a DeadlineExceeded error")
	fs.IntVar(&o.Descriptors, "descriptors", 1, "descriptors per request (1..64)")
	keys := fs.String("entry-keys", "d0,d1,d2,d3", "comma-separated entry keys; descriptor i uses the i-th, cycling")
	fs.IntVar(&o.Keys, "keys", 1000, "distinct values per entry key (key cardinality)")
	fs.StringVar(&o.Skew, "skew", "uniform", "value popularity: uniform or zipf")
	fs.Float64Var(&o.ZipfS, "zipf-s", 1.1, "Zipf exponent s (> 1) for -skew zipf")
	fs.Float64Var(&o.OverShare, "over-share", 0, "share of requests (0..1) whose first descriptor is a hot value that is over its limit")
	fs.IntVar(&o.HotKeys, "hot-keys", 8, "distinct hot values for -over-share")
	fs.StringVar(&o.HotPrefix, "hot-prefix", "hot-", "prefix of the hot values")
	fs.StringVar(&o.Domain, "domain", "bench", "rate-limit domain of every request")
	fs.Uint64Var(&o.HitsAddend, "hits-addend", 0, "request hits_addend (0 = unset, which the server counts as 1)")
	fs.Uint64Var(&o.Seed, "seed", 1, "random seed of the key choices")
	fs.BoolVar(&o.JSON, "json", false, "print the report as JSON")
	fs.BoolVar(&o.PerSecond, "per-second", false, "report the measured calls' outcomes by second of the run (JSON: per_second)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: loadgen [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.Requests > 0 && !set["duration"] {
		o.Duration = maxRunTime - o.Warmup
	}
	for t := range strings.SplitSeq(o.Target, ",") {
		o.Targets = append(o.Targets, strings.TrimSpace(t))
	}
	if !set["connections"] {
		o.Connections = max(o.Connections, len(o.Targets))
	}
	for k := range strings.SplitSeq(*keys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			o.EntryKeys = append(o.EntryKeys, k)
		}
	}
	return o, o.validate()
}

func (o *options) validate() error {
	for _, t := range o.Targets {
		if err := checkLoopback(t); err != nil {
			return err
		}
	}
	switch {
	case o.Concurrency < 1 || o.Concurrency > 100_000:
		return fmt.Errorf("-concurrency %d: want 1..100000", o.Concurrency)
	case o.Rate < 0:
		return fmt.Errorf("-rate %v: want >= 0 (0 = closed loop)", o.Rate)
	case o.Connections < 1 || o.Connections > 1024:
		return fmt.Errorf("-connections %d: want 1..1024", o.Connections)
	case o.Connections < len(o.Targets):
		return fmt.Errorf("-connections %d: want at least one per -target (%d)", o.Connections, len(o.Targets))
	case o.Duration <= 0:
		return fmt.Errorf("-duration %v: want > 0", o.Duration)
	case o.CallTimeout <= 0:
		return fmt.Errorf("-call-timeout %v: want > 0", o.CallTimeout)
	case o.Warmup < 0:
		return fmt.Errorf("-warmup %v: want >= 0", o.Warmup)
	case o.Warmup+o.Duration > maxRunTime:
		return fmt.Errorf("-warmup %v plus -duration %v: want at most %v", o.Warmup, o.Duration, maxRunTime)
	case o.Requests < 0:
		return fmt.Errorf("-requests %d: want >= 0", o.Requests)
	case o.Descriptors < 1 || o.Descriptors > 64:
		return fmt.Errorf("-descriptors %d: want 1..64", o.Descriptors)
	case len(o.EntryKeys) == 0:
		return errors.New("-entry-keys: want at least one key")
	case o.Keys < 1:
		return fmt.Errorf("-keys %d: want >= 1", o.Keys)
	case o.Skew != "uniform" && o.Skew != "zipf":
		return fmt.Errorf("-skew %q: want uniform or zipf", o.Skew)
	case o.Skew == "zipf" && !(o.ZipfS > 1):
		return fmt.Errorf("-zipf-s %v: want > 1", o.ZipfS)
	case !(o.OverShare >= 0 && o.OverShare <= 1):
		return fmt.Errorf("-over-share %v: want 0..1", o.OverShare)
	case o.OverShare > 0 && o.HotKeys < 1:
		return fmt.Errorf("-hot-keys %d: want >= 1 with -over-share", o.HotKeys)
	case o.Domain == "":
		return errors.New("-domain: want a domain")
	case o.HitsAddend > math.MaxUint32:
		return fmt.Errorf("-hits-addend %d: want at most %d (hits_addend is a uint32)", o.HitsAddend, uint32(math.MaxUint32))
	}
	return nil
}

// checkLoopback refuses any target that is not host:port with a loopback
// host: an IP in 127.0.0.0/8 or ::1, or the name localhost. A load generator
// aimed elsewhere by mistake is a denial of service.
func checkLoopback(target string) error {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("-target %q: want host:port: %w", target, err)
	}
	if port == "" {
		return fmt.Errorf("-target %q: want a port", target)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-target %q: only loopback targets are allowed (127.0.0.0/8, ::1, localhost)", target)
	}
	return nil
}

// dialAddr is the address to dial for a checked target: localhost is
// resolved here and every address it resolves to must be loopback, so a
// hosts file cannot point the load elsewhere.
func dialAddr(ctx context.Context, target string) (string, error) {
	host, port, _ := net.SplitHostPort(target)
	if !strings.EqualFold(host, "localhost") {
		return target, nil
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("resolve %s: no address", host)
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return "", fmt.Errorf("localhost resolves to %v, which is not loopback", ip.IP)
		}
	}
	return net.JoinHostPort(ips[0].IP.String(), port), nil
}
