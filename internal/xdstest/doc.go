// Package xdstest plays Envoy Gateway's side of the xDS config subscription
// for tests: a go-control-plane SnapshotCache behind an ADS server with
// mutual TLS as Envoy Gateway's rate limit runner sets it up (TLS 1.3,
// client certificates required), certificates laid out as Envoy Gateway
// mounts them at /certs, and a reader of the RateLimitConfig YAML that
// Envoy Gateway's translator tests produce.
//
// In the import chain it is a leaf for tests only: it imports
// go-control-plane and gRPC (never the testing package's helpers beyond
// testing.TB), and only _test.go files import it.
package xdstest
