package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/limiter/limitertest"
)

func TestStoreContract(t *testing.T) {
	t.Parallel()
	limitertest.TestStore(t, func(t *testing.T, now func() time.Time) limiter.Store {
		s, _ := newTestStore(t, Options{Now: now, CallTimeout: loadTimeout})
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
		return New(c, Options{Now: now, Prefix: prefix, CallTimeout: loadTimeout})
	})
}

func TestWarmLoadsLibrary(t *testing.T) {
	srv := redistest.Start(t)
	st, err := Open(Settings{URL: "redis://" + srv.Addr() + "/0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := redistest.Do(srv.Addr(), "FUNCTION", "LIST", "LIBRARYNAME", libName)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := got.([]any); len(l) != 1 {
		t.Errorf("FUNCTION LIST LIBRARYNAME %s after Warm = %v, want the library", libName, got)
	}
	srv.Stop()
	if err := st.Warm(context.Background()); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Errorf("Warm with Redis down = %v, want ErrStoreUnavailable", err)
	}
}
