package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
	"github.com/sluicehq/sluice/pkg/redis"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// epoch is an hour boundary, so windows start with the test.
var epoch = time.Unix(1_800_000_000-1_800_000_000%3600, 0)

// countingStore counts the Apply calls that reach the Store it wraps.
type countingStore struct {
	limiter.Store
	calls atomic.Int64
}

func (c *countingStore) Apply(ctx context.Context, hits []limiter.Hit) ([]limiter.Result, error) {
	c.calls.Add(1)
	return c.Store.Apply(ctx, hits)
}

func newService(t testing.TB, store limiter.Store) *ratelimit.Service {
	t.Helper()
	cfg, err := descriptors.Load("testdata/test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := ratelimit.New(ratelimit.Options{Store: store})
	s.SetConfig(cfg)
	return s
}

func entries(kv ...string) []descriptors.Entry {
	var es []descriptors.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, descriptors.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func decide(t *testing.T, s *ratelimit.Service, ds ...ratelimit.Descriptor) ratelimit.Decision {
	t.Helper()
	d, err := s.Decide(context.Background(), &ratelimit.Request{Domain: "test", Descriptors: ds})
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	if len(d.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(d.Statuses), len(ds))
	}
	return d
}

// TestQuotaDenialIsOneStoreCall: quota groups are decided by the store, so a
// quota-denied request costs one call and consumes nothing, and repeating it
// is answered by the over-limit cache without a store call.
func TestQuotaDenialIsOneStoreCall(t *testing.T) {
	clk := testclock.New(epoch)
	inner := &countingStore{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now})}
	cache := limiter.NewOverLimitCache(inner, limiter.OverLimitOptions{Now: clk.Now})
	s := newService(t, cache)
	a, b, q := ratelimit.Descriptor{Entries: entries("service", "a")}, ratelimit.Descriptor{Entries: entries("service", "b")},
		ratelimit.Descriptor{Entries: entries("api_key", "q")}
	if d := decide(t, s, a, b); d.Code != ratelimit.OK {
		t.Fatalf("first quota request: %v, want OK", d.Code)
	}
	inner.calls.Store(0)
	d := decide(t, s, a, b, q)
	if d.Code != ratelimit.OverLimit || d.Statuses[0].Code != ratelimit.OverLimit || d.Statuses[1].Code != ratelimit.OverLimit || d.Statuses[2].Code != ratelimit.OK {
		t.Fatalf("both quotas over: codes %v %v %v %v, want OVER_LIMIT OVER_LIMIT OVER_LIMIT OK", d.Code, d.Statuses[0].Code, d.Statuses[1].Code, d.Statuses[2].Code)
	}
	if n := inner.calls.Load(); n != 1 {
		t.Errorf("quota-denied request made %d store calls, want 1", n)
	}
	for range 10 {
		if d := decide(t, s, a, b, q); d.Code != ratelimit.OverLimit {
			t.Fatalf("repeated quota denial: %v, want OVER_LIMIT", d.Code)
		}
	}
	if n, hits := inner.calls.Load(), cache.Hits(); n != 1 || hits != 10 {
		t.Errorf("10 repeated quota denials: %d store calls and %d cache answers, want 1 and 10", n, hits)
	}
	if d := decide(t, s, q); d.Statuses[0].Result.Remaining != 2 {
		t.Errorf("per-key limit after denials: remaining %d, want 2 (nothing consumed)", d.Statuses[0].Result.Remaining)
	}
}

// TestOverrideRaisedKeepsCount: an override's counter is (domain, entries,
// window), so raising it mid-window keeps what was counted, as a reloaded
// config does, on memory and on Redis.
func TestOverrideRaisedKeepsCount(t *testing.T) {
	clk := testclock.New(epoch.Add(10 * time.Second))
	addr := redistest.Addr(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	stores := map[string]limiter.Store{
		"memory": limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now}),
		"redis":  redis.New(rdb, redis.Options{Prefix: redistest.Prefix(t.Name()), Now: clk.Now, CallTimeout: time.Second}),
	}
	t.Cleanup(func() { rdb.Close() })
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			s := newService(t, store)
			over := func(n uint32) ratelimit.Descriptor {
				return ratelimit.Descriptor{Entries: entries("tenant_override", "acme"),
					Override: &ratelimit.Override{RequestsPerUnit: n, Unit: descriptors.Minute}}
			}
			for i, want := range []uint64{1, 0} {
				if d := decide(t, s, over(2)); d.Code != ratelimit.OK || d.Statuses[0].Result.Remaining != want {
					t.Fatalf("call %d at 2/MINUTE: %v remaining %d, want OK remaining %d", i+1, d.Code, d.Statuses[0].Result.Remaining, want)
				}
			}
			d := decide(t, s, over(10))
			if d.Code != ratelimit.OK || d.Statuses[0].Result.Remaining != 7 {
				t.Errorf("raised to 10/MINUTE: %v remaining %d, want OK remaining 7", d.Code, d.Statuses[0].Result.Remaining)
			}
		})
	}
}

// failingStore fails every call.
type failingStore struct{}

func (failingStore) Apply(context.Context, []limiter.Hit) ([]limiter.Result, error) {
	return nil, errors.Join(limiter.ErrStoreUnavailable, errors.New("connection refused"))
}

func TestFailureModes(t *testing.T) {
	for _, tc := range []struct {
		mode      descriptors.FailureMode
		wantCode  ratelimit.Code
		wantErr   error
		wantRetry time.Duration
	}{
		{descriptors.FailureModeUnset, 0, limiter.ErrStoreUnavailable, 0},
		{descriptors.FailureModeError, 0, limiter.ErrStoreUnavailable, 0},
		{descriptors.FailureModeAllow, ratelimit.OK, nil, 0},
		{descriptors.FailureModeDeny, ratelimit.OverLimit, nil, time.Second},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			s := ratelimit.New(ratelimit.Options{Store: failingStore{}, FailureMode: tc.mode})
			cfg, err := descriptors.Load("testdata/test.yaml")
			if err != nil {
				t.Fatal(err)
			}
			s.SetConfig(cfg)
			d, err := s.Decide(context.Background(), &ratelimit.Request{Domain: "test", Descriptors: []ratelimit.Descriptor{
				{Entries: entries("api_key", "a")}, {Entries: entries("shadow", "s")}, {Entries: entries("nothing", "x")}}})
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Decide error %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if d.Code != tc.wantCode || d.RetryAfter != tc.wantRetry || d.FailureMode != tc.mode || d.Binding != -1 {
				t.Errorf("Decision = code %v retry %v mode %v binding %d, want %v %v %v -1", d.Code, d.RetryAfter, d.FailureMode, d.Binding, tc.wantCode, tc.wantRetry, tc.mode)
			}
			if d.Statuses[0].Code != tc.wantCode || d.Statuses[1].Code != ratelimit.OK || d.Statuses[2].Code != ratelimit.OK {
				t.Errorf("statuses %v %v %v: the limited one follows the mode, the shadow and unmatched ones are OK",
					d.Statuses[0].Code, d.Statuses[1].Code, d.Statuses[2].Code)
			}
		})
	}
}

func TestDecideErrors(t *testing.T) {
	s := newService(t, limiter.NewMemoryStore(limiter.MemoryOptions{}))
	for _, tc := range []struct {
		name string
		req  ratelimit.Request
		want error
	}{
		{"empty domain", ratelimit.Request{Descriptors: []ratelimit.Descriptor{{Entries: entries("a", "b")}}}, ratelimit.ErrInvalidRequest},
		{"override without unit", ratelimit.Request{Domain: "test", Descriptors: []ratelimit.Descriptor{
			{Entries: entries("a", "b"), Override: &ratelimit.Override{RequestsPerUnit: 1}}}}, ratelimit.ErrInvalidRequest},
		{"override longer than MaxWindow", ratelimit.Request{Domain: "test", Descriptors: []ratelimit.Descriptor{
			{Entries: entries("a", "b"), Override: &ratelimit.Override{RequestsPerUnit: 1, Unit: descriptors.Year, UnitMultiplier: 4294967295}}}}, ratelimit.ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Decide(context.Background(), &tc.req); !errors.Is(err, tc.want) {
				t.Errorf("Decide error %v, want %v", err, tc.want)
			}
		})
	}
	s.SetConfig(nil)
	if _, err := s.Decide(context.Background(), &ratelimit.Request{Domain: "test"}); !errors.Is(err, ratelimit.ErrNoConfig) {
		t.Errorf("no config: error %v, want ErrNoConfig", err)
	}
}

// TestBinding: the binding limit is the denying one with the longest
// RetryAfter on a denial, else the one with the least remaining; never a
// shadow-mode limit.
func TestBinding(t *testing.T) {
	s := newService(t, limiter.NewMemoryStore(limiter.MemoryOptions{Now: testclock.New(epoch).Now}))
	key := ratelimit.Descriptor{Entries: entries("api_key", "a")}
	search := ratelimit.Descriptor{Entries: entries("api_key", "a", "route", "search")}
	shadow := ratelimit.Descriptor{Entries: entries("shadow", "s")}
	if d := decide(t, s, shadow, key, search); d.Binding != 2 {
		t.Errorf("allowed: binding %d, want 2 (search: 1 left, per_key: 2)", d.Binding)
	}
	decide(t, s, search)
	d := decide(t, s, shadow, key, search)
	if d.Code != ratelimit.OverLimit || d.Binding != 2 || d.RetryAfter != d.Statuses[2].Result.RetryAfter || d.RetryAfter <= 0 {
		t.Errorf("denied: code %v binding %d retry %v, want OVER_LIMIT 2 and search's RetryAfter", d.Code, d.Binding, d.RetryAfter)
	}
	if d := decide(t, s, shadow); d.Binding != -1 {
		t.Errorf("shadow only: binding %d, want -1", d.Binding)
	}
}

// storeCalls records the store calls a StoreObserver is told of.
type storeCalls struct{ calls []ratelimit.StoreCall }

func (o *storeCalls) ObserveStore(_ context.Context, c ratelimit.StoreCall) {
	o.calls = append(o.calls, c)
}

// refusingStore fails every call with err.
type refusingStore struct{ err error }

func (f refusingStore) Apply(context.Context, []limiter.Hit) ([]limiter.Result, error) {
	return nil, f.err
}

// TestStoreObserversSeeEveryCall: every StoreObserver is told of each store
// call, in order, with the hits it sent and the store's error; a request
// that counts nothing makes no call and tells nobody.
func TestStoreObserversSeeEveryCall(t *testing.T) {
	cfg, err := descriptors.Load("testdata/test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	refused := fmt.Errorf("%w: connection refused", limiter.ErrStoreUnavailable)
	for _, tc := range []struct {
		name  string
		store limiter.Store
		want  error
	}{
		{"answered", limiter.NewMemoryStore(limiter.MemoryOptions{}), nil},
		{"failed", refusingStore{refused}, refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, second := &storeCalls{}, &storeCalls{}
			s := ratelimit.New(ratelimit.Options{Store: tc.store, StoreObservers: []ratelimit.StoreObserver{first, second},
				FailureMode: descriptors.FailureModeAllow})
			s.SetConfig(cfg)
			req := &ratelimit.Request{Domain: "test", Descriptors: []ratelimit.Descriptor{{Entries: entries("service", "a")}, {Entries: entries("nothing", "x")}}}
			if _, err := s.Decide(context.Background(), req); err != nil {
				t.Fatalf("Decide: %v", err)
			}
			unmatched := &ratelimit.Request{Domain: "test", Descriptors: []ratelimit.Descriptor{{Entries: entries("nothing", "x")}}}
			if _, err := s.Decide(context.Background(), unmatched); err != nil {
				t.Fatalf("Decide: %v", err)
			}
			for _, o := range []*storeCalls{first, second} {
				if len(o.calls) != 1 || o.calls[0].Hits != 1 || o.calls[0].Err != tc.want || o.calls[0].Start.IsZero() || o.calls[0].Took < 0 {
					t.Errorf("store calls observed = %+v, want one of 1 hit with error %v", o.calls, tc.want)
				}
			}
		})
	}
}
