//go:build compat

package xdsconfig_test

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCompatEnvoyGateway builds every RateLimitConfig that Envoy
// Gateway's translator produces (shared/compat/envoy-gateway, beside the
// repository; the project keeps copies of a few in internal/xdstest) and
// checks that the descriptor Envoy sends for each limit finds it. Behind
// the "compat" build tag: 'make compat' runs it.
func TestCompatEnvoyGateway(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "compat", "envoy-gateway", "ratelimit-config")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Envoy Gateway configs missing: %v; the shared/ folder must sit beside the repository root (../shared from it)", err)
	}
	checkEnvoyGateway(t, dir)
}
