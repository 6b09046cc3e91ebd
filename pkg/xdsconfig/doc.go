// Package xdsconfig loads Sluice's descriptor config over xDS, as Envoy
// Gateway serves it to envoyproxy/ratelimit: a State of the World
// subscription on the Aggregated Discovery Service to
// type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig, one
// resource per domain (go-control-plane's ratelimit module).
//
// It owns two things. The conversion (Document, Build) turns
// RateLimitConfig resources into pkg/descriptors' source-neutral tree and
// builds it with descriptors.Build, the one builder every source shares, so
// an xDS config obeys every rule a YAML file does and its errors read like
// file errors, positioned by resource and field path:
// "xds:first-listener: descriptors[0].rate_limit.unit: missing unit ...".
// The Client keeps the subscription: it ACKs a snapshot that builds, NACKs
// one that does not with those errors as error_detail, keeps the last good
// config, reconnects with jittered backoff, and answers a server that
// re-sends a refused snapshot without building it again.
//
// It does not decide what to do with a config (internal/source's State
// swaps it in and counts it, internal/app shows it), and it does not read settings or
// files: the caller gives it a TLS config and a node.
//
// In the import chain it sits beside pkg/rls, under internal/source: it imports
// pkg/descriptors, go-control-plane's protos and gRPC, and nothing of
// pkg/ratelimit, pkg/rls or pkg/redis.
package xdsconfig
