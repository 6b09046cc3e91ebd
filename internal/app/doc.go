// Package app is the sluice command: Main parses the settings
// (internal/settings), and the server it runs wires them to a store
// (pkg/redis or the in-memory one of pkg/limiter), the decision
// (pkg/ratelimit), its front ends (pkg/rls, pkg/rlqs), the config source
// (internal/source) and the listeners: gRPC, HTTP, debug and the peer's
// metrics listener. It owns the order of start-up and shutdown, the one
// assembly of the store with its decorators and observers (backend.go),
// the one rendering of /config (config.go) and the one set-up of tracing
// (tracing.go).
//
// It sits at the top of the import chain: only cmd/server imports it, and
// it imports nothing above it.
package app
