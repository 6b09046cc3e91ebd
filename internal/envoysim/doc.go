// Package envoysim lets tests check an Envoy rate limit configuration
// without running Envoy. It validates go-control-plane messages the way
// Envoy does at load time (ValidateDeep, ValidateAnys), replays Envoy's
// route rate_limits actions on a simulated request to produce the
// descriptors Envoy would send (Request, Entries, HeadersMatch), and checks
// each of those descriptors against a Sluice config (MatchConfig).
//
// It owns only what the Envoy example (examples/envoy) and the Istio
// example (examples/istio) share. It does not parse Envoy bootstrap files
// or Istio resources, and it does not decide which route a request takes:
// Envoy's RouteMatch and Istio's VirtualService match differ, so each
// example keeps its own route matching and calls Entries for the route it
// picked.
//
// In the import chain it is a leaf for tests only: it imports
// go-control-plane, protobuf, pkg/descriptors and pkg/ratelimit (for the
// reserved slot token entry; never the testing package), and only _test.go
// files import it, never production code.
package envoysim
