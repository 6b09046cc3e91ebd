package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/ratelimit"
	"github.com/sluicehq/sluice/pkg/tenants"
)

// tenantPart is the server's tenant tables (tenants_from): where they live,
// the cache the decisions read them through, and the admin API.
type tenantPart struct {
	src   tenants.Source // the Redis tables, or --tenants-file; nil: none
	write tenants.Writer
	cache *tenants.Cache
}

// tenantSource is where the tables live: Redis's when the store is Redis,
// else --tenants-file, else nowhere (rules count their own limits).
func (srv *server) tenantSource() (tenants.Source, tenants.Writer, error) {
	if srv.store.redis != nil {
		t := srv.store.redis.TenantTables()
		return t, t, nil
	}
	if srv.set.Tenants.TenantsFile == "" {
		return nil, nil, nil
	}
	f, err := tenants.OpenFile(srv.set.Tenants.TenantsFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--tenants-file: %w", err)
	}
	return f, f, nil
}

// newTenants builds the tenant cache and binds the admin API's listener.
// It returns the lookup the decision core is given (nil without tables).
func (srv *server) newTenants() (ratelimit.Tenants, error) {
	src, w, err := srv.tenantSource()
	if err != nil || src == nil {
		return nil, err
	}
	t := &srv.tenants
	t.src, t.write = src, w
	t.cache = tenants.NewCache(src, tenants.Options{Size: srv.set.Tenants.TenantCacheSize, Logger: srv.log.Named("tenants")})
	srv.registerTenantMetrics(t.cache)
	if srv.set.Tenants.AdminAddr != "" {
		tokens, err := readTokens(srv.set.Tenants.AdminTokens)
		if err != nil {
			return nil, fmt.Errorf("--admin-tokens: %w", err)
		}
		a := &admin{src: src, w: w, tokens: tokens, config: func() *descriptors.Config { return srv.core.Config() }, log: srv.log.Named("admin")}
		ln, err := net.Listen("tcp", srv.set.Tenants.AdminAddr)
		if err != nil {
			return nil, fmt.Errorf("--admin-addr: %w (set --admin-addr to another address, or empty to turn it off)", err)
		}
		// Served, shut down and closed with the debug and metrics listeners.
		srv.extra = append(srv.extra, extraListener{name: "admin-addr", ln: ln,
			srv: &http.Server{Handler: a.handler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: httpIdleTimeout, MaxHeaderBytes: httpMaxHeaderBytes}})
	}
	return t.cache, nil
}

// registerTenantMetrics exports the cache's counters.
func (srv *server) registerTenantMetrics(c *tenants.Cache) {
	stat := func(name, help string, f func(tenants.Stats) uint64) {
		srv.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(c.Stats())) }))
	}
	stat("sluice_tenant_lookups_total", "Tenant rows looked up by decisions.", func(s tenants.Stats) uint64 { return s.Lookups })
	stat("sluice_tenant_reads_total", "Tenant rows read from the table (cache misses and rows to read again).", func(s tenants.Stats) uint64 { return s.Reads })
	stat("sluice_tenant_read_errors_total", "Tenant rows that could not be read: the value got the row last seen, else the default plan.",
		func(s tenants.Stats) uint64 { return s.ReadErrors })
	stat("sluice_tenant_bad_rows_total", "Tenant rows whose text did not parse: the value got the default plan.", func(s tenants.Stats) uint64 { return s.BadRows })
	stat("sluice_tenant_changes_total", "Changes to tenant tables received from the change feed.", func(s tenants.Stats) uint64 { return s.Changes })
	stat("sluice_tenant_feed_errors_total", "Failed reads of the tenant change feed (cached rows stay as last seen meanwhile).",
		func(s tenants.Stats) uint64 { return s.FeedErrors })
	srv.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_tenant_cache_rows",
		Help: "Tenant rows (absences included) cached, at most --tenant-cache-size."}, func() float64 { return float64(c.Stats().Rows) }))
}

// runTenants follows the change feed until ctx ends; wg tracks it.
func (srv *server) runTenants(ctx context.Context, wg *sync.WaitGroup) {
	if srv.tenants.cache == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv.tenants.cache.Run(ctx)
	}()
}
