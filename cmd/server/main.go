// Command sluice is the Sluice rate-limit service: Envoy's
// envoy.service.ratelimit.v3 API on gRPC, with an HTTP admin and /json
// listener. Run it with no arguments to serve the config in ./config on the
// in-memory store; "sluice check PATH..." validates configs for CI. All of
// it is internal/app's: this command hands it the process's arguments,
// environment, output and signals.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := app.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
