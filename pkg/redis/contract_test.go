package redis

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/limiter/limitertest"
)

func TestStoreContract(t *testing.T) {
	t.Parallel()
	limitertest.TestStore(t, func(t *testing.T, now func() time.Time) limiter.Store {
		s, _ := newTestStore(t, Options{Now: now})
		return s
	})
}

func TestStoreContractCluster(t *testing.T) {
	t.Parallel()
	addrs := redistest.Cluster(t)
	limitertest.TestStore(t, func(t *testing.T, now func() time.Time) limiter.Store {
		prefix := redistest.Prefix(t.Name())
		c := newClusterClient(t, addrs)
		t.Cleanup(func() { deletePrefix(t, newClusterClient(t, addrs), prefix) })
		return New(c, Options{Now: now, Prefix: prefix, CallTimeout: testTimeout})
	})
}
