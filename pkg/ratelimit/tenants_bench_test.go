package ratelimit_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
	"github.com/sluicehq/sluice/pkg/tenants"
)

// rowSource is a tenant table where every value is on plan big.
type rowSource struct{}

func (rowSource) Row(context.Context, string, string) (string, bool, error) { return "big", true, nil }
func (rowSource) Changes(ctx context.Context, c string) ([]tenants.Change, string, error) {
	<-ctx.Done()
	return nil, c, ctx.Err()
}

// benchDecide runs Decide at 64 callers per CPU over 1000 values of d0.
func benchDecide(b *testing.B, domain string, t ratelimit.Tenants) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "b.yaml", Data: []byte(`domain: yaml
descriptors:
  - key: d0
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`)}, descriptors.Source{Name: "t.yaml", Data: []byte(`domain: tenant
descriptors:
  - key: d0
    tenants_from: bench
    rate_limit: {unit: second, requests_per_unit: 1000000000}
    plans:
      big: {rate_limit: {unit: second, requests_per_unit: 1000000000}}
`)})
	if err != nil {
		b.Fatal(err)
	}
	s := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{}), Tenants: t})
	s.SetConfig(cfg)
	values := make([]string, 1000)
	for i := range values {
		values[i] = "k" + strconv.Itoa(i)
		if t != nil {
			t.Tenant(context.Background(), "bench", values[i]) // warm
		}
	}
	var next atomic.Int64
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &ratelimit.Request{Domain: domain, Descriptors: []ratelimit.Descriptor{{Entries: []descriptors.Entry{{Key: "d0"}}}}}
		for i := int(next.Add(1)); pb.Next(); i++ {
			req.Descriptors[0].Entries[0].Value = values[i%len(values)]
			if d, err := s.Decide(context.Background(), req); err != nil || d.Code != ratelimit.OK {
				b.Fatal(d.Code, err)
			}
		}
	})
}

// BenchmarkDecideYAMLLimit is the yardstick: a limit from the YAML alone.
func BenchmarkDecideYAMLLimit(b *testing.B) { benchDecide(b, "yaml", nil) }

// BenchmarkDecideTenantWarm decides the same limit through a tenant table
// whose every row is cached.
func BenchmarkDecideTenantWarm(b *testing.B) {
	benchDecide(b, "tenant", tenants.NewCache(rowSource{}, tenants.Options{}))
}
