// Command sluice-image builds Sluice's container image without a Docker
// daemon and without pulling a base: a multi-platform OCI image (linux/amd64
// and linux/arm64 by default) written as an OCI image layout directory, plus
// the same layout as one tar file (an oci-archive) beside it. Push the
// layout with sluice-push (make push), crane or skopeo, e.g.
//
//	sluice-push -layout build/image -image registry.example.com/sluice:0.3.0
//	crane push build/image registry.example.com/sluice:0.3.0
//	skopeo copy --all oci:build/image:0.3.0 docker://registry.example.com/sluice:0.3.0
//
// The image has the contract of the repository's Dockerfile: the static
// binary at /sluice and /bin/ratelimit (a symlink to it, the path
// envoyproxy/ratelimit's deployments run), the example config in
// /etc/sluice/config with /etc/sluice the working directory, user
// 65534:65534, ports 8080, 8081 and 6070, no shell, and the OCI labels
// title, version, source and licenses. The base is empty (scratch) plus the
// CA bundle of the build machine's Debian ca-certificates package (for
// rediss:// and OTLP over TLS) and an /etc/passwd and /etc/group naming
// root and nobody.
//
// Usage:
//
//	sluice-image -src REPO -version 0.3.0 -out DIR
//
// Every file's time is the -created time (default $SOURCE_DATE_EPOCH, else
// the Unix epoch), so the same sources and toolchain give the same digests.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-image: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("sluice-image", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.Src, "src", ".", "the Sluice repository to build from")
	fs.StringVar(&o.Version, "version", "", "the version to stamp and label (required: the repository's VERSION, or a snapshot's)")
	fs.StringVar(&o.Out, "out", "build/image", "the OCI layout directory to write; OUT.tar gets the same as an oci-archive")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated OS/ARCH list")
	fs.StringVar(&o.CABundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the PEM CA bundle to ship (Debian's ca-certificates package writes this one)")
	fs.StringVar(&o.Revision, "revision", "", "the commit, for the org.opencontainers.image.revision label (empty: no label)")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "Unix seconds for the image's and its files' times (default $SOURCE_DATE_EPOCH, else 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Version == "" {
		return fmt.Errorf("-version is required")
	}
	if *created != "" {
		sec, err := strconv.ParseInt(*created, 10, 64)
		if err != nil {
			return fmt.Errorf("-created %q: want Unix seconds: %v", *created, err)
		}
		o.Created = time.Unix(sec, 0).UTC()
	} else {
		o.Created = time.Unix(0, 0).UTC()
	}
	for _, p := range strings.Split(*platforms, ",") {
		goos, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || goos != "linux" || arch == "" {
			return fmt.Errorf("-platforms: %q is not linux/ARCH", p)
		}
		o.Arches = append(o.Arches, arch)
	}
	src, err := filepath.Abs(o.Src)
	if err != nil {
		return err
	}
	o.Src = src
	return build(o)
}
