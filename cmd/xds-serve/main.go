// Command xds-serve serves a directory of descriptor YAML files over xDS as
// Envoy Gateway serves its rate limit service's config: a State of the
// World ADS stream of type.googleapis.com/ratelimit.config.ratelimit.v3.
// RateLimitConfig resources from go-control-plane's SnapshotCache, one
// resource per domain (per file), optionally over mutual TLS. It is for
// trying Sluice's xDS mode (--xds-server) locally before rolling it out
// behind Envoy Gateway; it is not a control plane.
//
// Usage:
//
//	xds-serve [--addr 127.0.0.1:18001] [--tls-dir DIR] [--interval 500ms] DIR
//
// It loads DIR's *.yaml and *.yml files with Sluice's loader (so a config
// error is reported at its file, line and column) and converts each domain
// into a RateLimitConfig. Fields the RateLimitConfig proto has no room for
// (Sluice's additions: algorithm, rate_limits, unit_multiplier, burst,
// sub_windows, overdraw, quota_mode, value_to_metric, share_threshold,
// metadata, failure_mode) are refused, since Envoy Gateway cannot send
// them either. It serves the same snapshot to every node id, and watches
// DIR: each change that loads becomes a new snapshot (version 1, 2, ...);
// one that does not is logged and the snapshot in force stays.
//
// With --tls-dir it serves TLS 1.3 and requires a client certificate, as
// Envoy Gateway does. The directory's ca.crt, server.crt and server.key are
// used, or made (a CA and certificates for 127.0.0.1 and localhost, valid
// 30 days) when ca.crt is missing, together with tls.crt and tls.key: the
// client certificate for Sluice's --xds-tls-cert and --xds-tls-key, beside
// ca.crt for --xds-tls-ca, as Envoy Gateway mounts them at /certs.
//
// It logs "listening" with the address (grpc_addr) once it serves, and
// stops on SIGINT or SIGTERM. Exit codes: 0 stopped by a signal, 1 it
// could not start, 2 bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// options are the command line.
type options struct {
	dir       string
	addr      string
	tlsDir    string
	interval  time.Duration
	logFormat string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run parses args, serves until a signal and returns the exit code.
func run(args []string, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "xds-serve:", err)
		return 2
	}
	log := newLogger(o.logFormat, stderr)
	defer log.Sync()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, o, log); err != nil {
		log.Error("cannot serve", zap.Error(err))
		return 1
	}
	return 0
}

// parse reads the flags and the directory argument.
func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("xds-serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:18001", "address to serve xDS on (Envoy Gateway's port is 18001)")
	fs.StringVar(&o.tlsDir, "tls-dir", "", "serve mutual TLS with the certificates of this directory, made there when it has no ca.crt")
	fs.DurationVar(&o.interval, "interval", 500*time.Millisecond, "how often to look for changed files")
	fs.StringVar(&o.logFormat, "log-format", "console", "console or json")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: xds-serve [flags] DIR\n\nServes DIR's descriptor YAML files over xDS, as Envoy Gateway serves RateLimitConfig resources.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return o, errors.New("want one directory of descriptor YAML files")
	}
	o.dir = fs.Arg(0)
	if o.interval < 10*time.Millisecond {
		return o, fmt.Errorf("--interval %v: want 10ms or more", o.interval)
	}
	if o.logFormat != "console" && o.logFormat != "json" {
		return o, fmt.Errorf("--log-format %q: want console or json", o.logFormat)
	}
	return o, nil
}

// newLogger logs at Info to w, in format (console or json).
func newLogger(format string, w io.Writer) *zap.Logger {
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	enc := zapcore.NewJSONEncoder(ec)
	if format == "console" {
		enc = zapcore.NewConsoleEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), zapcore.InfoLevel))
}
