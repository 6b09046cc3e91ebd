// Command sluice-push pushes the image that sluice-image wrote (an OCI
// image layout directory) to a registry, every platform of it: the
// multi-platform index and each platform's image, under one reference.
// It needs no Docker daemon, crane or skopeo; it signs in with the
// credentials docker login stores ($DOCKER_CONFIG or ~/.docker/config.json,
// and the credential helpers named there), anonymously when there are none.
//
// Usage:
//
//	sluice-push -layout build/image -image registry.example.com/sluice:0.3.0
//
// It prints the reference pushed with its digest, which names the index
// and so every platform at once (registry.example.com/sluice@sha256:...).
// A registry on localhost, a loopback or private address, or a .local name
// is spoken to over plain HTTP, as docker does; any other over HTTPS.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-push: %v\n", err)
		os.Exit(1)
	}
}

// run parses args and pushes; it prints the pushed reference with its
// digest to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sluice-push", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.Layout, "layout", "build/image", "the OCI image layout directory sluice-image wrote")
	fs.StringVar(&o.Image, "image", "", "where to push: registry/repository:tag (required), e.g. registry.example.com/sluice:0.3.0")
	fs.StringVar(&o.RefName, "ref-name", "", "the org.opencontainers.image.ref.name of the index to push, when the layout holds several (sluice-image names it by -version)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.Image == "" {
		return errors.New("-image is required: where to push, registry/repository:tag")
	}
	pushed, err := push(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, pushed)
	return nil
}
