package ratelimit_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// downStore is a Store that is unavailable while down is set.
type downStore struct {
	limiter.Store
	down bool
}

func (s *downStore) Apply(ctx context.Context, hits []limiter.Hit) ([]limiter.Result, error) {
	if s.down {
		return nil, limiter.ErrStoreUnavailable
	}
	return s.Store.Apply(ctx, hits)
}

// TestFailureModeLocal: while the store fails, a domain whose failure mode
// is local is decided on its share of each limit, and LocalSince says
// since when; once the store answers, it decides again.
func TestFailureModeLocal(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "local.yaml", Data: []byte(`domain: d
failure_mode: local
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 6}
`)})
	if err != nil {
		t.Fatal(err)
	}
	store := &downStore{Store: limiter.NewMemoryStore(limiter.MemoryOptions{}), down: true}
	svc := ratelimit.New(ratelimit.Options{Store: store,
		Local: limiter.NewLocal(limiter.LocalOptions{Instances: func() int { return 3 }})})
	svc.SetConfig(cfg)
	req := &ratelimit.Request{Domain: "d", Descriptors: []ratelimit.Descriptor{{Entries: []descriptors.Entry{{Key: "k", Value: "v"}}}}}
	var codes []ratelimit.Code
	for range 3 {
		d, err := svc.Decide(context.Background(), req)
		if err != nil {
			t.Fatalf("Decide with the store down: %v", err)
		}
		if d.FailureMode != descriptors.FailureModeLocal {
			t.Errorf("FailureMode = %v, want local", d.FailureMode)
		}
		codes = append(codes, d.Code)
	}
	if want := []ratelimit.Code{ratelimit.OK, ratelimit.OK, ratelimit.OverLimit}; !slices.Equal(codes, want) {
		t.Errorf("codes = %v, want %v (a share of 6/3)", codes, want)
	}
	if svc.LocalSince().IsZero() {
		t.Error("LocalSince is zero while deciding locally")
	}
	store.down = false
	d, err := svc.Decide(context.Background(), req)
	if err != nil || d.FailureMode != descriptors.FailureModeUnset || d.Code != ratelimit.OK {
		t.Errorf("after the store is back: %v, %v, %v; want OK from the store", d.Code, d.FailureMode, err)
	}
	if !svc.LocalSince().IsZero() {
		t.Errorf("LocalSince = %v once the store answers, want zero", svc.LocalSince())
	}
}
