package settings

import (
	"fmt"
	"net"
	"strconv"

	"github.com/sluicehq/sluice/pkg/tenants"
)

// TenantSettings are the tenant tables' settings (tenants_from): where the
// in-memory store keeps them, the cache's bound, and the admin API.
type TenantSettings struct {
	TenantsFile     string
	TenantCacheSize int
	AdminAddr       string
	AdminTokens     string
}

// table lists the tenant tables' flags, appended to the settings table.
func (t *TenantSettings) table() []setting {
	return []setting{
		{"tenants-file", "in-memory store: a YAML file of the tenant tables (tenants_from), table to value to row, read again when it changes; with Redis the tables are in Redis", "", &t.TenantsFile},
		{"tenant-cache-size", "tenant rows (absences included) each instance caches, least recently used first out (about 200 B each)", strconv.Itoa(tenants.DefaultSize), &t.TenantCacheSize},
		{"admin-addr", "listen address of the tenant admin API (/v1/tenants/...), loopback only; empty: off", "", &t.AdminAddr},
		{"admin-tokens", "with --admin-addr: a file of the API's bearer tokens, one `NAME TOKEN` per line (the name is logged with each change)", "", &t.AdminTokens},
	}
}

// validate checks the tenant tables' flags.
func (t *TenantSettings) validate() error {
	if t.TenantCacheSize < 1 {
		return fmt.Errorf("--tenant-cache-size: %d must be at least 1", t.TenantCacheSize)
	}
	if t.AdminAddr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(t.AdminAddr)
	if err != nil {
		return fmt.Errorf("--admin-addr: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--admin-addr: %q is not a loopback address (the admin API changes limits: bind 127.0.0.1 or ::1, and reach it through a tunnel or a sidecar)", t.AdminAddr)
	}
	if t.AdminTokens == "" {
		return fmt.Errorf("--admin-addr needs --admin-tokens (every call is authenticated)")
	}
	return nil
}
