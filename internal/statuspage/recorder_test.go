package statuspage

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

const testConfig = `domain: edge
descriptors:
  - key: api_key
    rate_limit: {name: per_api_key, unit: minute, requests_per_unit: 100}
    descriptors:
      - key: route
        value: search
        rate_limit: {name: search, unit: minute, requests_per_unit: 10}
  - key: path
    value: /v1/*
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: card
    rate_limit: {name: per_card, unit: hour, requests_per_unit: 3}
`

func loadConfig(t testing.TB) *descriptors.Config {
	t.Helper()
	cfg, err := descriptors.Parse(descriptors.Source{Name: "edge.yaml", Data: []byte(testConfig)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// observe tells r of one counted descriptor of domain edge, as Decide would.
func observe(t testing.TB, r *Recorder, cfg *descriptors.Config, hits uint64, allowed bool, remaining uint64, kv ...string) {
	var es []descriptors.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, descriptors.Entry{Key: kv[i], Value: kv[i+1]})
	}
	rule := cfg.Match("edge", es)
	if rule == nil || rule.Limit == nil {
		t.Fatalf("no limited rule matches %v", kv)
	}
	name := rule.Limit.Name
	if name == "" {
		name = strings.TrimPrefix(rule.FullKey, "edge.")
	}
	st := ratelimit.Status{Rule: rule, Limit: rule.Limit, Name: name, Hits: hits,
		Result: limiter.Result{Allowed: allowed, Remaining: remaining, OverLimit: !allowed}}
	if !allowed {
		st.Code = ratelimit.OverLimit
	}
	r.ObserveDescriptor(cfg.Domain("edge"), &st, es)
}

func find(t *testing.T, v view, rule string) ruleView {
	t.Helper()
	for _, r := range v.Rules {
		if r.Rule == rule {
			return r
		}
	}
	t.Fatalf("no rule %q in %+v", rule, v.Rules)
	return ruleView{}
}

// TestRatesSharesAndTopValues: per-rule rates and shares over the last 10
// complete seconds, the per-second series, and the values with the most
// hits, with their over-limit hits.
func TestRatesSharesAndTopValues(t *testing.T) {
	cfg := loadConfig(t)
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	r := NewRecorder(Options{Now: clk.Now, TopValues: 2})
	for s := range 10 {
		for i := range 20 {
			// 20 decisions a second: a 10, b 6, c 4; b's are over limit.
			key := map[bool]string{true: "a", false: "c"}[i < 10]
			if i >= 10 && i < 16 {
				key = "b"
			}
			allowed, remaining := key != "b", uint64(50)
			if key == "a" {
				remaining = 10 // 90 of 100 used: near limit
			}
			observe(t, r, cfg, 1, allowed, remaining, "api_key", key)
		}
		_ = s
		clk.Advance(time.Second)
	}
	v := r.view(context.Background(), Sources{Config: func() *descriptors.Config { return cfg }})
	got := find(t, v, "per_api_key")
	if got.DecisionsPerSec != 20 || got.HitsPerSec != 20 {
		t.Errorf("rates = %v decisions/s, %v hits/s; want 20, 20", got.DecisionsPerSec, got.HitsPerSec)
	}
	if got.OverShare != 0.3 || got.NearShare != 0.5 {
		t.Errorf("over share %v, near share %v; want 0.3, 0.5", got.OverShare, got.NearShare)
	}
	if got.Limit != "100 / minute" || got.Algorithm != "sliding_window" {
		t.Errorf("limit %q %q", got.Limit, got.Algorithm)
	}
	// The series ends with the last complete second: 10 seconds of 20
	// decisions (6 over limit) after nothing.
	if len(got.Decisions) != seriesSeconds || got.Decisions[seriesSeconds-1] != 20 || got.Over[seriesSeconds-1] != 6 ||
		got.Decisions[seriesSeconds-10] != 20 || got.Decisions[seriesSeconds-11] != 0 {
		t.Errorf("series ends %v / %v, want 0, then 20 x 10 / 0, then 6 x 10", got.Decisions[seriesSeconds-12:], got.Over[seriesSeconds-12:])
	}
	want := []valueView{{Value: "api_key=a", Hits: 100}, {Value: "api_key=b", Hits: 60, Over: 60}}
	if fmt.Sprint(got.Top) != fmt.Sprint(want) {
		t.Errorf("top = %+v, want %+v", got.Top, want)
	}
	// Configured rules with no traffic are listed too, with their limits.
	if p := find(t, v, "path_/v1/*"); p.Limit != "5 / second" || p.DecisionsPerSec != 0 || len(p.Decisions) != seriesSeconds {
		t.Errorf("idle rule = %+v", p)
	}
	// A fixed value of the rule is not repeated in the key; the variable one is.
	observe(t, r, cfg, 1, true, 5, "api_key", "a", "route", "search")
	observe(t, r, cfg, 1, true, 5, "path", "/v1/users")
	v = r.view(context.Background(), Sources{})
	if top := find(t, v, "search").Top; len(top) != 1 || top[0].Value != "api_key=a" {
		t.Errorf("search top = %+v, want api_key=a", top)
	}
	if top := find(t, v, "path_/v1/*").Top; len(top) != 1 || top[0].Value != "path=/v1/users" {
		t.Errorf("wildcard top = %+v, want path=/v1/users", top)
	}
}

// TestTopValuesAgeOut: the top values are those of the last 30 to 60 s.
func TestTopValuesAgeOut(t *testing.T) {
	cfg := loadConfig(t)
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	r := NewRecorder(Options{Now: clk.Now})
	observe(t, r, cfg, 1, true, 1, "api_key", "old")
	clk.Advance(35 * time.Second)
	observe(t, r, cfg, 1, true, 1, "api_key", "new")
	if top := find(t, r.view(context.Background(), Sources{}), "per_api_key").Top; len(top) != 2 {
		t.Errorf("after 35 s: top = %+v, want old and new", top)
	}
	clk.Advance(30 * time.Second)
	if top := find(t, r.view(context.Background(), Sources{}), "per_api_key").Top; len(top) != 1 || top[0].Value != "api_key=new" {
		t.Errorf("after 65 s: top = %+v, want only new", top)
	}
	clk.Advance(61 * time.Second)
	if top := find(t, r.view(context.Background(), Sources{}), "per_api_key").Top; len(top) != 0 {
		t.Errorf("after 2 idle minutes: top = %+v, want none", top)
	}
}

// TestSensitiveAndOff: a sensitive domain or rule, or TopValues < 0,
// records no value at all (counts still show).
func TestSensitiveAndOff(t *testing.T) {
	cfg := loadConfig(t)
	for _, tc := range []struct {
		name string
		opts Options
		want map[string]bool // rule -> values recorded
	}{
		{"rule", Options{Sensitive: []string{"edge/per_card"}}, map[string]bool{"per_card": false, "per_api_key": true}},
		{"domain", Options{Sensitive: []string{"edge"}}, map[string]bool{"per_card": false, "per_api_key": false}},
		{"off", Options{TopValues: -1}, map[string]bool{"per_card": false, "per_api_key": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testclock.New(time.Unix(1_800_000_000, 0))
			tc.opts.Now = clk.Now
			r := NewRecorder(tc.opts)
			observe(t, r, cfg, 1, true, 1, "card", "4111111111111111")
			observe(t, r, cfg, 1, true, 1, "api_key", "k")
			clk.Advance(time.Second)
			v := r.view(context.Background(), Sources{})
			for rule, recorded := range tc.want {
				got := find(t, v, rule)
				if (len(got.Top) > 0) != recorded || got.ValuesHidden == (recorded || tc.name == "off") && tc.name != "off" {
					t.Errorf("%s: top %+v hidden %v, want recorded=%v", rule, got.Top, got.ValuesHidden, recorded)
				}
				if got.Decisions[seriesSeconds-1] != 1 {
					t.Errorf("%s: counts not recorded: %v", rule, got.Decisions[seriesSeconds-1])
				}
			}
			if strings.Contains(fmt.Sprint(v), "4111111111111111") {
				t.Errorf("a sensitive value is in the view")
			}
		})
	}
}

// TestLongValuesShortened: a value longer than MaxValueBytes is cut on a
// rune boundary and hashed, so two long values that share a prefix stay
// distinct, and no key is longer than maxKeyBytes.
func TestLongValuesShortened(t *testing.T) {
	long := strings.Repeat("é", 2000)
	a := string(valueKey(nil, nil, []descriptors.Entry{{Key: "k", Value: long + "a"}}))
	b := string(valueKey(nil, nil, []descriptors.Entry{{Key: "k", Value: long + "b"}}))
	if a == b || len(a) > maxKeyBytes || !strings.HasPrefix(a, "k=éé") || !strings.Contains(a, "…#") {
		t.Errorf("valueKey of long values: %q and %q", a, b)
	}
	var es []descriptors.Entry
	for i := range 30 {
		es = append(es, descriptors.Entry{Key: fmt.Sprintf("key%d", i), Value: strings.Repeat("v", 40)})
	}
	if k := valueKey(nil, nil, es); len(k) > maxKeyBytes {
		t.Errorf("30 entries: key of %d bytes, want <= %d", len(k), maxKeyBytes)
	}
}

// TestMemoryBoundUnderMillionValues: a million distinct values, each seen
// once (many of them long), with 10 heavy hitters among them, keep the
// summary at its fixed size and the heap growth under 1 MiB, and the heavy
// hitters are the values shown, with exact counts (a value whose count
// exceeds total/size is never evicted: the space-saving guarantee).
func TestMemoryBoundUnderMillionValues(t *testing.T) {
	cfg := loadConfig(t)
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	r := NewRecorder(Options{Now: clk.Now})
	dom := cfg.Domain("edge")
	rule := cfg.Match("edge", []descriptors.Entry{{Key: "api_key", Value: "x"}})
	allowed := ratelimit.Status{Rule: rule, Limit: rule.Limit, Name: "per_api_key", Hits: 1, Result: limiter.Result{Allowed: true, Remaining: 50}}
	denied := ratelimit.Status{Rule: rule, Limit: rule.Limit, Name: "per_api_key", Hits: 1, Code: ratelimit.OverLimit, Result: limiter.Result{OverLimit: true}}
	es := []descriptors.Entry{{Key: "api_key", Value: "warm"}}
	r.ObserveDescriptor(dom, &allowed, es) // create the rule before measuring
	long := strings.Repeat("x", 300)
	buf := make([]byte, 0, 400)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const distinct, heavy, heavyHits = 1_000_000, DefaultTopValues, 50_000
	for i := range distinct {
		buf = strconv.AppendInt(append(buf[:0], "client-"...), int64(i), 10)
		es[0].Value = string(append(buf, long[:i%300]...))
		r.ObserveDescriptor(dom, &allowed, es)
		if i%2 == 0 {
			es[0].Value = "heavy-" + strconv.Itoa(i/2%heavy)
			r.ObserveDescriptor(dom, &denied, es)
		}
	}
	es = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	rs := r.rules[ruleKey{"edge", "per_api_key"}]
	if n := len(rs.cur.heap); n != 4*DefaultTopValues || len(rs.cur.index) != n {
		t.Errorf("summary holds %d items (%d indexed), want %d", n, len(rs.cur.index), 4*DefaultTopValues)
	}
	for _, it := range rs.cur.heap {
		if len(it.key) > maxKeyBytes {
			t.Errorf("key of %d bytes kept", len(it.key))
		}
	}
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if grew > 1<<20 {
		t.Errorf("heap grew %d bytes over 1M distinct values, want < 1 MiB", grew)
	}
	t.Logf("1M distinct values (1.5M observations): heap grew %d bytes; the summary holds %d keys", grew, len(rs.cur.heap))
	top := find(t, r.view(context.Background(), Sources{}), "per_api_key").Top
	if len(top) != DefaultTopValues {
		t.Fatalf("top has %d values, want %d", len(top), DefaultTopValues)
	}
	for _, v := range top {
		if !strings.HasPrefix(v.Value, "api_key=heavy-") || v.Hits != heavyHits || v.Over != heavyHits || v.MaxError != 0 {
			t.Errorf("top value %+v, want a heavy hitter with exactly %d hits, all over limit", v, heavyHits)
		}
	}
}

// TestMaxRules: rules past MaxRules are not recorded, and counted as such.
func TestMaxRules(t *testing.T) {
	cfg := loadConfig(t)
	r := NewRecorder(Options{MaxRules: 1})
	observe(t, r, cfg, 1, true, 1, "api_key", "a")
	observe(t, r, cfg, 1, true, 1, "card", "c")
	if v := r.view(context.Background(), Sources{}); len(v.Rules) != 1 || v.DroppedRules != 1 {
		t.Errorf("rules %d, dropped %d; want 1, 1", len(v.Rules), v.DroppedRules)
	}
}

// TestStoreCallsAndLatency: the store observer counts calls and errors per
// second and estimates latency quantiles from its buckets.
func TestStoreCallsAndLatency(t *testing.T) {
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	r := NewRecorder(Options{Now: clk.Now})
	refused := errors.New("dial tcp: connection refused")
	for range 10 {
		for range 9 {
			r.ObserveStore(context.Background(), ratelimit.StoreCall{Start: clk.Now()})
		}
		r.ObserveStore(context.Background(), ratelimit.StoreCall{Start: clk.Now(), Err: refused})
		clk.Advance(time.Second)
	}
	v := r.view(context.Background(), Sources{StoreKind: "redis", Health: func(context.Context) string { return "store unreachable: refused" }})
	st := v.Store
	if st.CallsPerSec != 10 || st.ErrorsPerSec != 1 || st.Healthy || st.Kind != "redis" || !strings.Contains(st.LastError, "refused") {
		t.Errorf("store view = %+v", st)
	}
	// Every call took 0 s, in the first bucket (0 to 100 us).
	if st.P50Ms != 0.05 || st.P99Ms > 0.1 {
		t.Errorf("p50 %v ms, p99 %v ms; want 0.05, <= 0.1", st.P50Ms, st.P99Ms)
	}
	hist := make([]uint64, len(latencyBounds)+1)
	hist[3], hist[5] = 50, 50 // 50 in (0.5, 1] ms, 50 in (2.5, 5] ms
	if q := quantile(0.5, hist); q != time.Millisecond {
		t.Errorf("p50 = %v, want 1ms", q)
	}
	if q := quantile(0.99, hist); q < 4900*time.Microsecond || q > 5*time.Millisecond {
		t.Errorf("p99 = %v, want about 4.95ms", q)
	}
}

// BenchmarkObserve measures what the status page adds to every counted
// descriptor: "tracked" repeats a value the summary holds (the common case
// under a hot key), "distinct" sends a new value every time, out of a
// million (each one evicts the least counted).
func BenchmarkObserve(b *testing.B) {
	cfg := loadConfig(b)
	dom := cfg.Domain("edge")
	rule := cfg.Match("edge", []descriptors.Entry{{Key: "api_key", Value: "x"}})
	st := ratelimit.Status{Rule: rule, Limit: rule.Limit, Name: "per_api_key", Hits: 1, Result: limiter.Result{Allowed: true, Remaining: 10}}
	values := make([]string, 1<<20)
	for i := range values {
		values[i] = "client-" + strconv.Itoa(i)
	}
	for _, bc := range []struct {
		name string
		mask int
	}{{"tracked", 7}, {"distinct", 1<<20 - 1}} {
		b.Run(bc.name, func(b *testing.B) {
			r := NewRecorder(Options{})
			es := []descriptors.Entry{{Key: "api_key"}}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				es[0].Value = values[i&bc.mask]
				r.ObserveDescriptor(dom, &st, es)
				i++
			}
		})
	}
}

// BenchmarkDecideWithPage compares one decision on the in-memory store
// without and with the status page observing it (values from 1000 clients);
// run with -count and compare medians: the machine is shared.
func BenchmarkDecideWithPage(b *testing.B) {
	cfg := loadConfig(b)
	reqs := make([]ratelimit.Request, 1000)
	for i := range reqs {
		reqs[i] = ratelimit.Request{Domain: "edge", Descriptors: []ratelimit.Descriptor{{Entries: []descriptors.Entry{{Key: "api_key", Value: "client-" + strconv.Itoa(i)}}}}}
	}
	for _, bc := range []struct {
		name string
		obs  []ratelimit.Observer
	}{{"off", nil}, {"on", []ratelimit.Observer{NewRecorder(Options{})}}} {
		b.Run(bc.name, func(b *testing.B) {
			svc := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{}), Observers: bc.obs})
			svc.SetConfig(cfg)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := svc.Decide(ctx, &reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// TestLayeredRuleCard: a rule with a rate_limits list shows every limit of
// the list and each algorithm once, idle or seen.
func TestLayeredRuleCard(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "edge.yaml", Data: []byte(`domain: edge
descriptors:
  - key: tenant
    rate_limits:
      - {name: tenant_burst, unit: second, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 1000, algorithm: fixed_window}
      - {unit: minute, requests_per_unit: 100, algorithm: fixed_window}
`)})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(Options{Now: testclock.New(time.Unix(1_800_000_000, 0)).Now})
	v := r.view(context.Background(), Sources{Config: func() *descriptors.Config { return cfg }})
	got := find(t, v, "tenant_burst")
	if got.Limit != "5 / second, 1000 / hour, 100 / minute" || got.Algorithm != "sliding_window, fixed_window" {
		t.Errorf("layered card: limit %q, algorithm %q", got.Limit, got.Algorithm)
	}
	observe(t, r, cfg, 1, true, 4, "tenant", "t1")
	v = r.view(context.Background(), Sources{Config: func() *descriptors.Config { return cfg }})
	if got := find(t, v, "tenant_burst"); got.Limit != "5 / second, 1000 / hour, 100 / minute" {
		t.Errorf("layered card once seen: limit %q", got.Limit)
	}
}

// TestRefundsAndReleasesAreNotHits drives a Service on config/edge.yaml: a
// token budget's reports of 70 and 80 and a refund of 60 are 150 hits and 60
// refunded, 5 acquires and 5 releases of a concurrency limit 5 hits (and
// decisions) and 5 released, over the 10 s the rates span; a refund adds
// nothing to the top values.
func TestRefundsAndReleasesAreNotHits(t *testing.T) {
	cfg, err := descriptors.Load("../../config/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	r := NewRecorder(Options{Now: clk.Now})
	s := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now}), Observers: []ratelimit.Observer{r}})
	s.SetConfig(cfg)
	decide := func(d ratelimit.Descriptor) {
		t.Helper()
		if _, err := s.Decide(context.Background(), &ratelimit.Request{Domain: "edge", Descriptors: []ratelimit.Descriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	budget := func(n uint64, refund bool) ratelimit.Descriptor {
		return ratelimit.Descriptor{Entries: []descriptors.Entry{{Key: "token_budget", Value: "k1"}}, HitsAddend: n, HasHitsAddend: true, IsNegativeHits: refund}
	}
	decide(budget(70, false))
	decide(budget(80, false))
	decide(budget(60, true))
	for _, release := range []bool{false, false, false, false, false, true, true, true, true, true} {
		decide(ratelimit.Descriptor{Entries: []descriptors.Entry{{Key: "streams", Value: "k1"}}, IsNegativeHits: release})
	}
	clk.Advance(time.Second)
	v := r.view(context.Background(), Sources{Config: func() *descriptors.Config { return cfg }})
	for _, tc := range []struct {
		rule                      string
		decisions, hits, refunded float64
		top                       uint64
	}{
		{"tokens_per_api_key", 0.2, 15, 6, 150},
		{"streams_per_api_key", 0.5, 0.5, 0.5, 5},
	} {
		got := find(t, v, tc.rule)
		if got.DecisionsPerSec != tc.decisions || got.HitsPerSec != tc.hits || got.RefundedPerSec != tc.refunded {
			t.Errorf("%s: %v decisions/s, %v hits/s, %v refunded/s; want %v, %v, %v", tc.rule,
				got.DecisionsPerSec, got.HitsPerSec, got.RefundedPerSec, tc.decisions, tc.hits, tc.refunded)
		}
		if len(got.Top) != 1 || got.Top[0].Hits != tc.top {
			t.Errorf("%s: top %+v, want one value with %d hits", tc.rule, got.Top, tc.top)
		}
	}
}

// TestPoolClassesOnThePage drives a Service on config/edge.yaml: the pool is
// one rule on the page, with each class's admitted and shed hits per second
// over the 10 s the rates span, its classes in config order with their
// ceilings, and a class never seen shown at zero.
func TestPoolClassesOnThePage(t *testing.T) {
	cfg, err := descriptors.Load("../../config/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	r := NewRecorder(Options{Now: clk.Now})
	s := ratelimit.New(ratelimit.Options{Store: limiter.NewMemoryStore(limiter.MemoryOptions{Now: clk.Now}), Observers: []ratelimit.Observer{r}})
	s.SetConfig(cfg)
	v := r.view(context.Background(), Sources{Config: func() *descriptors.Config { return cfg }})
	if got := find(t, v, "pool_checkout_db"); len(got.Classes) != 4 || got.Classes[3] != (classView{Class: "test", Ceiling: "50%"}) {
		t.Fatalf("idle pool: classes %+v, want critical, default, batch, test at zero", got.Classes)
	}
	decide := func(class string, n int) {
		t.Helper()
		for range n {
			es := []descriptors.Entry{{Key: "pool", Value: "checkout_db"}, {Key: "priority", Value: class}}
			if _, err := s.Decide(context.Background(), &ratelimit.Request{Domain: "edge", Descriptors: []ratelimit.Descriptor{{Entries: es}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	decide("default", 900) // 800 admitted, 100 shed
	decide("critical", 150)
	decide("batch", 10)
	clk.Advance(time.Second)
	v = r.view(context.Background(), Sources{Config: func() *descriptors.Config { return cfg }})
	got := find(t, v, "pool_checkout_db")
	want := []classView{
		{Class: "critical", Ceiling: "100%", AdmittedPerSec: 15},
		{Class: "default", Ceiling: "80%", AdmittedPerSec: 80, ShedPerSec: 10},
		{Class: "batch", Ceiling: "70%", ShedPerSec: 1},
		{Class: "test", Ceiling: "50%"},
	}
	if fmt.Sprint(got.Classes) != fmt.Sprint(want) {
		t.Errorf("classes = %+v, want %+v", got.Classes, want)
	}
	if got.DecisionsPerSec != 106 || got.Limit != "1000 / second" {
		t.Errorf("pool rule: %v decisions/s, limit %q; want 106, 1000 / second", got.DecisionsPerSec, got.Limit)
	}
}
