//go:build compat

package app

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCompatXDSEnvoyGateway is TestXDSEnvoyGatewayConfigs over every
// RateLimitConfig Envoy Gateway's translator produces
// (shared/compat/envoy-gateway, beside the repository). Behind the
// "compat" build tag: 'make compat' runs it.
func TestCompatXDSEnvoyGateway(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "compat", "envoy-gateway", "ratelimit-config")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Envoy Gateway configs missing: %v; the shared/ folder must sit beside the repository root (../shared from it)", err)
	}
	checkXDSConfigs(t, dir)
}
