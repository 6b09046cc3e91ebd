package xdsconfig_test

import (
	"path/filepath"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/xdstest"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/xdsconfig"
)

// anys packs configs as an xDS response carries them.
func anys(t testing.TB, configs ...*rlsconfv3.RateLimitConfig) []*anypb.Any {
	t.Helper()
	out := make([]*anypb.Any, len(configs))
	for i, c := range configs {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = a
	}
	return out
}

// readTestdata reads every resource of the Envoy Gateway files in dir.
func readTestdata(t testing.TB, dir string) map[string][]*rlsconfv3.RateLimitConfig {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Envoy Gateway configs in %s (%v)", dir, err)
	}
	out := make(map[string][]*rlsconfv3.RateLimitConfig)
	for _, f := range files {
		rcs, err := xdstest.ReadYAML(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = rcs
	}
	return out
}

// TestBuildEnvoyGateway builds each Envoy Gateway output, all its
// resources as one snapshot, and checks that every limit in it is found
// by the descriptor Envoy sends for it.
func TestBuildEnvoyGateway(t *testing.T) {
	checkEnvoyGateway(t, xdstest.Testdata())
}

func checkEnvoyGateway(t *testing.T, dir string) {
	for name, rcs := range readTestdata(t, dir) {
		t.Run(name, func(t *testing.T) {
			cfg, err := xdsconfig.Build(anys(t, rcs...))
			if err != nil {
				t.Fatalf("Build:\n%v", err)
			}
			if len(cfg.Warnings) > 0 {
				t.Errorf("warnings: %v", cfg.Warnings)
			}
			for _, rc := range rcs {
				if got := cfg.Domain(rc.GetDomain()); got == nil || got.File != "xds:"+rc.GetName() {
					t.Errorf("domain %q: %+v, want one from xds:%s", rc.GetDomain(), got, rc.GetName())
				}
				calls, err := xdstest.Calls(rc, "user-1")
				if err != nil || len(calls) == 0 {
					t.Fatalf("Calls: %v, %v", calls, err)
				}
				for _, c := range calls {
					entries := make([]descriptors.Entry, len(c.Entries))
					for i, e := range c.Entries {
						entries[i] = descriptors.Entry{Key: e.Key, Value: e.Value}
					}
					r := cfg.Match(c.Domain, entries)
					if r == nil || r.Limit == nil || r.Limit.RequestsPerUnit != c.Limit.GetRequestsPerUnit() ||
						!strings.EqualFold(r.Limit.Unit.String(), c.Limit.GetUnit().String()) || r.ShadowMode != c.ShadowMode {
						t.Errorf("Match(%q, %v) = %+v, want %d per %v, shadow_mode %v", c.Domain, entries, r,
							c.Limit.GetRequestsPerUnit(), c.Limit.GetUnit(), c.ShadowMode)
					}
				}
			}
		})
	}
}

// TestDocument checks the conversion of every field.
func TestDocument(t *testing.T) {
	rc := &rlsconfv3.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", Value: "v", ShadowMode: true, DetailedMetric: true, RateLimit: &rlsconfv3.RateLimitPolicy{
			Unit: rlsconfv3.RateLimitUnit_WEEK, RequestsPerUnit: 0, Name: "lim",
			Replaces: []*rlsconfv3.RateLimitReplace{{Name: "other"}}}},
		{Key: "u", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		nil,
	}}
	doc := xdsconfig.Document(rc)
	if doc.File != "xds:n" || doc.Domain != descriptors.Set("d") || len(doc.Descriptors) != 3 || doc.Descriptors[2] != nil {
		t.Fatalf("Document = %+v", doc)
	}
	n := doc.Descriptors[0]
	rl := n.RateLimit
	if n.Key != descriptors.Set("k") || n.Value != descriptors.Set("v") || n.ShadowMode != descriptors.Set(true) || n.DetailedMetric != descriptors.Set(true) ||
		rl.Unit != descriptors.Set("WEEK") || rl.RequestsPerUnit != descriptors.Set(uint32(0)) || rl.Name != descriptors.Set("lim") ||
		rl.Unlimited != descriptors.Set(false) || len(rl.Replaces.Value) != 1 || rl.Replaces.Value[0].Name != descriptors.Set("other") {
		t.Errorf("descriptors[0] = %+v, rate_limit %+v", n, rl)
	}
	// Unlimited: no unit (UNKNOWN is absent) and no requests_per_unit (0
	// with unlimited is proto3's absent).
	u := doc.Descriptors[1].RateLimit
	if u.Unit.State != descriptors.FieldAbsent || u.RequestsPerUnit.State != descriptors.FieldAbsent || u.Unlimited != descriptors.Set(true) {
		t.Errorf("unlimited rate_limit = %+v", u)
	}
	if xdsconfig.Document(nil) != nil {
		t.Error("Document(nil) is not nil")
	}
}

// TestBuildErrors checks that each problem is refused with an error
// positioned by resource and field path.
func TestBuildErrors(t *testing.T) {
	limit := func(unit rlsconfv3.RateLimitUnit, n uint32) *rlsconfv3.RateLimitPolicy {
		return &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}
	}
	rc := func(name, domain string, ds ...*rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitConfig {
		return &rlsconfv3.RateLimitConfig{Name: name, Domain: domain, Descriptors: ds}
	}
	route := func(inner ...*rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitDescriptor {
		return &rlsconfv3.RateLimitDescriptor{Key: "first-route", Value: "first-route", Descriptors: inner}
	}
	notRLC, _ := anypb.New(wrapperspb.String("x"))
	for _, tc := range []struct {
		name      string
		resources []*anypb.Any
		want      []string
	}{
		{"unit UNKNOWN", anys(t, rc("first-listener", "first-listener", route(&rlsconfv3.RateLimitDescriptor{Key: "rule-0-match-0", RateLimit: limit(0, 5)}))),
			[]string{"xds:first-listener: descriptors[0].descriptors[0].rate_limit.unit: missing unit (want second, minute, hour, day, week, month or year)"}},
		{"unit unknown to the proto", anys(t, rc("a", "a", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(99, 5)})),
			[]string{`xds:a: descriptors[0].rate_limit.unit: unknown unit "99" (want second, minute, hour, day, week, month or year)`}},
		{"unlimited with a unit", anys(t, rc("a", "a", &rlsconfv3.RateLimitDescriptor{Key: "k",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_SECOND}})),
			[]string{"xds:a: descriptors[0].rate_limit.unit: unit with unlimited: true (an unlimited limit counts nothing; remove one of them)"}},
		{"empty key, empty domain", anys(t, rc("a", "", &rlsconfv3.RateLimitDescriptor{RateLimit: limit(1, 1)})),
			[]string{"xds:a: descriptors[0].key: empty key", "xds:a: domain: empty domain"}},
		{"duplicate siblings", anys(t, rc("a", "a", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, 1)},
			&rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, 2)})),
			[]string{`xds:a: descriptors[1]: duplicate descriptor: key "k" without a value is already at descriptors[0]`}},
		{"replaces itself", anys(t, rc("a", "a", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{
			Unit: 1, RequestsPerUnit: 1, Name: "me", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "me"}}}})),
			[]string{`xds:a: descriptors[0].rate_limit.replaces[0].name: limit "me" replaces itself`}},
		{"the same domain in two resources", anys(t, rc("a", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, 1)}),
			rc("b", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, 1)})),
			[]string{`xds:b: domain: domain "d" is already defined in xds:a (one domain per resource; the xDS server must send each domain in a single RateLimitConfig)`}},
		{"the same name twice", anys(t, rc("a", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, 1)}),
			rc("a", "e", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(1, 1)})),
			[]string{`xds:a: name: resource name "a" is also the name of resources[0] (each resource needs its own name)`}},
		{"a nameless resource", anys(t, rc("", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(0, 1)})),
			[]string{"xds:resources[0]: descriptors[0].rate_limit.unit: missing unit (want second, minute, hour, day, week, month or year)"}},
		{"another type", []*anypb.Any{notRLC},
			[]string{`xds:resources[0]: type_url: want type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig, got "type.googleapis.com/google.protobuf.StringValue"`}},
		{"bytes that are no RateLimitConfig", []*anypb.Any{{TypeUrl: xdsconfig.TypeURL, Value: []byte{0xff}}},
			[]string{"xds:resources[0]: value: not a RateLimitConfig: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := xdsconfig.Build(tc.resources)
			if err == nil {
				t.Fatalf("Build = %v, nil; want errors", cfg)
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tc.want) {
				t.Fatalf("Build errors:\n%v\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("error %d = %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestBuildAccepts checks what the proto's zero values mean: 0 requests
// is a limit that admits nothing, unlimited needs no unit, and no
// resources at all is an empty config.
func TestBuildAccepts(t *testing.T) {
	cfg, err := xdsconfig.Build(anys(t, &rlsconfv3.RateLimitConfig{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "zero", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE}},
		{Key: "free", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Match("a", []descriptors.Entry{{Key: "zero", Value: "x"}}); r == nil || r.Limit == nil || r.Limit.RequestsPerUnit != 0 {
		t.Errorf("zero: %+v, want a limit of 0 per minute", r)
	}
	if r := cfg.Match("a", []descriptors.Entry{{Key: "free", Value: "x"}}); r == nil || !r.Unlimited {
		t.Errorf("free: %+v, want unlimited", r)
	}
	empty, err := xdsconfig.Build(nil)
	if err != nil || empty == nil || len(empty.Domains()) != 0 {
		t.Errorf("Build(nil) = %v, %v; want an empty config", empty, err)
	}
}

// TestBuildWarnsOfUnknownFields: a field this build's proto does not know
// (as a newer control plane's quota_mode would be) still builds, with a
// warning that names the resource, the path and the field number, so that
// it is not ignored without a word; known fields give none.
func TestBuildWarnsOfUnknownFields(t *testing.T) {
	child := &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 5}}
	child.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	rc := &rlsconfv3.RateLimitConfig{Name: "gw", Domain: "gw", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "route", Value: "r", Descriptors: []*rlsconfv3.RateLimitDescriptor{child}}}}
	cfg, err := xdsconfig.Build(anys(t, rc))
	if err != nil {
		t.Fatal(err)
	}
	want := "xds:gw: descriptors[0].descriptors[0]: field number 99 of ratelimit.config.ratelimit.v3.RateLimitDescriptor is unknown to this build's proto and ignored"
	if len(cfg.Warnings) != 1 || !strings.HasPrefix(cfg.Warnings[0].Error(), want) {
		t.Errorf("warnings = %v, want one starting %q", cfg.Warnings, want)
	}
	if r := cfg.Match("gw", []descriptors.Entry{{Key: "route", Value: "r"}, {Key: "k", Value: "x"}}); r == nil || r.Limit == nil || r.Limit.RequestsPerUnit != 5 {
		t.Errorf("the limit with the unknown field: %+v, want 5 per second", r)
	}
	for name, rcs := range readTestdata(t, xdstest.Testdata()) {
		if cfg, err := xdsconfig.Build(anys(t, rcs...)); err == nil {
			for _, w := range cfg.Warnings {
				if strings.Contains(w.Error(), "unknown to this build's proto") {
					t.Errorf("%s: %v", name, w)
				}
			}
		}
	}
}
