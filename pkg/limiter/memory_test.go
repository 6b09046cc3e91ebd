package limiter_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/limiter/limitertest"
)

func TestMemoryStoreContract(t *testing.T) {
	limitertest.TestStore(t, func(t *testing.T, now func() time.Time) limiter.Store {
		return limiter.NewMemoryStore(limiter.MemoryOptions{Now: now})
	})
}

func TestMemoryStoreContractOneShard(t *testing.T) {
	limitertest.TestStore(t, func(t *testing.T, now func() time.Time) limiter.Store {
		return limiter.NewMemoryStore(limiter.MemoryOptions{Now: now, Shards: 1})
	})
}
