package tenants

import (
	"context"
	"runtime"
	"strconv"
	"testing"
)

// planSource gives every value plan pro, or own limits for every fourth.
type planSource struct{}

func (planSource) Row(_ context.Context, _, v string) (string, bool, error) {
	if len(v)%4 == 0 {
		return "50000/minute", true, nil
	}
	return "pro", true, nil
}
func (planSource) Changes(ctx context.Context, c string) ([]Change, string, error) {
	<-ctx.Done()
	return nil, c, ctx.Err()
}

// BenchmarkCacheMemory fills a cache of 100,000 rows (values like
// "tenant-0000042") and reports the heap it holds per row.
func BenchmarkCacheMemory(b *testing.B) {
	const rows = 100_000
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c := NewCache(planSource{}, Options{Size: rows})
		for i := range rows {
			c.Tenant(context.Background(), "api_tenants", "tenant-"+strconv.Itoa(1_000_000 + i)[1:])
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/rows, "B/row")
		runtime.KeepAlive(c)
	}
}

// BenchmarkCacheHit is one lookup of a cached row, at 64 callers per CPU.
func BenchmarkCacheHit(b *testing.B) {
	c := NewCache(planSource{}, Options{})
	values := make([]string, 1000)
	for i := range values {
		values[i] = "k" + strconv.Itoa(i)
		c.Tenant(context.Background(), "t", values[i])
	}
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if c.Tenant(context.Background(), "t", values[i%len(values)]) == nil {
				b.Fatal("no row")
			}
		}
	})
}
