package envoysim_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/envoysim"
	"github.com/sluicehq/sluice/pkg/descriptors"
)

// rateLimitFilter returns an HTTP filter whose typed_config holds a rate
// limit filter for domain; an empty domain breaks RateLimit's own rules.
func rateLimitFilter(t *testing.T, domain string) *hcmv3.HttpFilter {
	t.Helper()
	rl := &ratelimitv3.RateLimit{
		Domain: domain,
		RateLimitService: &rlconfv3.RateLimitServiceConfig{
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "sluice"},
			}},
			TransportApiVersion: corev3.ApiVersion_V3,
		},
	}
	a, err := anypb.New(rl)
	if err != nil {
		t.Fatal(err)
	}
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.ratelimit", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}}
}

func TestValidateDeep(t *testing.T) {
	unresolvable := rateLimitFilter(t, "edge")
	unresolvable.GetTypedConfig().TypeUrl = "type.googleapis.com/no.such.Message"
	unnamed := rateLimitFilter(t, "edge")
	unnamed.Name = ""

	for _, tc := range []struct {
		name string
		m    proto.Message
		want string // a substring of the only error, "" for none
	}{
		{"valid", rateLimitFilter(t, "edge"), ""},
		// ValidateAll on the HttpFilter alone passes: it checks the Any's
		// type URL, never the RateLimit inside.
		{"invalid message nested in an Any", rateLimitFilter(t, ""), "filter.typed_config(RateLimit): invalid RateLimit.Domain"},
		{"invalid outer message", unnamed, "filter: invalid HttpFilter.Name"},
		{"Any of an unknown type", unresolvable, "filter.typed_config: unpack type.googleapis.com/no.such.Message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := envoysim.ValidateDeep(tc.m, "filter")
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("ValidateDeep = %v, want no errors", errs)
			case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want)):
				t.Errorf("ValidateDeep = %v, want one error containing %q", errs, tc.want)
			}
		})
	}
}

// TestValidateAnys checks that a fragment is not held to the rules of the
// whole message, while the messages inside its Anys are.
func TestValidateAnys(t *testing.T) {
	// A Route without match or action, as in an Istio MERGE patch.
	r := &routev3.Route{TypedPerFilterConfig: map[string]*anypb.Any{}}
	if errs := envoysim.ValidateAnys(r, "route"); len(errs) != 0 {
		t.Errorf("ValidateAnys(fragment) = %v, want no errors", errs)
	}
	if errs := envoysim.ValidateDeep(r, "route"); len(errs) == 0 {
		t.Error("ValidateDeep(fragment) = no errors, want the missing match")
	}
	a, err := anypb.New(rateLimitFilter(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	r.TypedPerFilterConfig["x"] = a
	errs := envoysim.ValidateAnys(r, "route")
	if want := "route.typed_per_filter_config[x](HttpFilter).typed_config(RateLimit)"; len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
		t.Errorf("ValidateAnys = %v, want one error at %s", errs, want)
	}
}

func TestEntries(t *testing.T) {
	req := envoysim.Request{
		Path:          "/v1/search",
		Headers:       map[string]string{"x-api-key": "alice"},
		Authority:     "example.com",
		ClientAddress: "203.0.113.7",
	}
	header := func(name, key string, skip bool) *routev3.RateLimit_Action {
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{
			RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{HeaderName: name, DescriptorKey: key, SkipIfAbsent: skip},
		}}
	}
	remote := &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{
		RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{},
	}}
	generic := &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
		GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorValue: "beta"},
	}}
	pathMatch := func(re string, expect *wrapperspb.BoolValue, def string) *routev3.RateLimit_Action {
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_HeaderValueMatch_{
			HeaderValueMatch: &routev3.RateLimit_Action_HeaderValueMatch{
				DescriptorValue: "search",
				ExpectMatch:     expect,
				DefaultValue:    def,
				Headers: []*routev3.HeaderMatcher{{Name: ":path", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
					StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{
						SafeRegex: &matcherv3.RegexMatcher{Regex: re},
					}},
				}}},
			},
		}}
	}

	for _, tc := range []struct {
		name    string
		actions []*routev3.RateLimit_Action
		want    string // FormatEntries of the result, "none" for no descriptor
		wantErr string
	}{
		{"request header", []*routev3.RateLimit_Action{header("x-api-key", "api_key", false)}, "[api_key=alice]", ""},
		{"pseudo-header", []*routev3.RateLimit_Action{header(":authority", "host", false)}, "[host=example.com]", ""},
		{"absent header sends nothing", []*routev3.RateLimit_Action{header("x-other", "k", false), remote}, "none", ""},
		{"absent header skipped", []*routev3.RateLimit_Action{header("x-other", "k", true), remote}, "[remote_address=203.0.113.7]", ""},
		{"generic_key default key", []*routev3.RateLimit_Action{generic}, "[generic_key=beta]", ""},
		{"header_value_match", []*routev3.RateLimit_Action{pathMatch("/v1/search(/.*)?", nil, "")}, "[header_match=search]", ""},
		{"header_value_match is anchored", []*routev3.RateLimit_Action{pathMatch("/v1/sea", nil, "")}, "none", ""},
		{"header_value_match expect_match false", []*routev3.RateLimit_Action{pathMatch("/v1/sea", wrapperspb.Bool(false), "")}, "[header_match=search]", ""},
		{"header_value_match default_value", []*routev3.RateLimit_Action{pathMatch("/x", nil, "other")}, "", "actions[0]: header_value_match default_value is not simulated"},
		{"unknown action", []*routev3.RateLimit_Action{{}}, "", "actions[0]: action <nil> is not simulated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, ok, err := envoysim.Entries(tc.actions, req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Entries error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := "none"
			if ok {
				got = envoysim.FormatEntries(es)
			}
			if got != tc.want {
				t.Errorf("Entries = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestHeadersMatch(t *testing.T) {
	req := envoysim.Request{Path: "/v1/Search", Headers: map[string]string{"x-api-key": "Alice"}}
	str := func(name string, sm *matcherv3.StringMatcher, invert bool) *routev3.HeaderMatcher {
		return &routev3.HeaderMatcher{Name: name, InvertMatch: invert, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: sm}}
	}
	exact := func(v string, fold bool) *matcherv3.StringMatcher {
		return &matcherv3.StringMatcher{IgnoreCase: fold, MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}
	}
	regex := func(re string, fold bool) *matcherv3.StringMatcher {
		return &matcherv3.StringMatcher{IgnoreCase: fold, MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}
	}
	present := func(name string, want bool) *routev3.HeaderMatcher {
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: want}}
	}
	for _, tc := range []struct {
		name string
		hms  []*routev3.HeaderMatcher
		want bool
	}{
		{"no matchers", nil, true},
		{"present", []*routev3.HeaderMatcher{present("X-Api-Key", true)}, true},
		{"absent", []*routev3.HeaderMatcher{present("x-other", false)}, true},
		{"exact is case-sensitive", []*routev3.HeaderMatcher{str("x-api-key", exact("alice", false), false)}, false},
		{"exact ignore_case", []*routev3.HeaderMatcher{str("x-api-key", exact("alice", true), false)}, true},
		{"absent header never matches a string", []*routev3.HeaderMatcher{str("x-other", exact("", false), false)}, false},
		{"invert", []*routev3.HeaderMatcher{str("x-api-key", exact("bob", false), true)}, true},
		{"safe_regex", []*routev3.HeaderMatcher{str(":path", regex("/v1/Search.*", false), false)}, true},
		{"safe_regex ignores ignore_case", []*routev3.HeaderMatcher{str(":path", regex("/v1/search", true), false)}, false},
		{"every matcher must match", []*routev3.HeaderMatcher{present("x-api-key", true), present("x-other", true)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := envoysim.HeadersMatch(tc.hms, req)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("HeadersMatch = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSampleRequests(t *testing.T) {
	base := envoysim.Request{Path: "/ignored", ClientAddress: "203.0.113.7"}
	var got []string
	for _, r := range envoysim.SampleRequests(base, []string{"/a", "/b"}, []string{"x-api-key", "x-other"}, map[string]string{"x-api-key": "alice"}) {
		if r.ClientAddress != base.ClientAddress {
			t.Errorf("ClientAddress = %q, want %q", r.ClientAddress, base.ClientAddress)
		}
		got = append(got, r.String())
	}
	want := []string{
		"GET /a", "GET /a x-api-key:alice", "GET /a x-other:sample-x-other", "GET /a x-api-key:alice x-other:sample-x-other",
		"GET /b", "GET /b x-api-key:alice", "GET /b x-other:sample-x-other", "GET /b x-api-key:alice x-other:sample-x-other",
	}
	if !slices.Equal(got, want) {
		t.Errorf("SampleRequests =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func TestMatchConfig(t *testing.T) {
	cfg, err := descriptors.Parse(descriptors.Source{Name: "edge.yaml", Data: []byte(`domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: internal
    rate_limit: {unlimited: true}
  - key: bare
`)})
	if err != nil {
		t.Fatal(err)
	}
	d := func(domain, key string) envoysim.Descriptor {
		return envoysim.Descriptor{
			Req:     envoysim.Request{Path: "/"},
			Route:   "r",
			Domain:  domain,
			Entries: []envoysim.Entry{{Entry: descriptors.Entry{Key: key, Value: "v"}, Source: "x-" + key}},
		}
	}
	all := []envoysim.Descriptor{
		d("edge", "api_key"), d("edge", "internal"), // limited, unlimited: fine
		d("edge", "bare"), d("edge", "bare"), // no rate_limit: reported once
		d("other", "api_key"), // unknown domain
	}
	var got []string
	for _, err := range envoysim.MatchConfig(cfg, all, "test config") {
		got = append(got, err.Error())
	}
	want := []string{
		`route "r", GET /: domain "edge": [bare=v] matches rule edge.bare (edge.yaml:7), which has no rate_limit`,
		`route "r", GET /: domain "other": [api_key=v] matches no rule in test config`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("MatchConfig =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	if got, want := all[0].Shape(), "edge [api_key=<x-api_key>]"; got != want {
		t.Errorf("Shape() = %q, want %q", got, want)
	}
}

// TestXRateLimitHeaders follows Envoy's own cases for its x-ratelimit
// headers: the least remaining gives the first item, remaining and reset;
// every limit adds an item, with its name when it has one.
func TestXRateLimitHeaders(t *testing.T) {
	st := func(rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, name string, remaining uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
		return &rlsv3.RateLimitResponse_DescriptorStatus{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit, Name: name},
			LimitRemaining: remaining, DurationUntilReset: durationpb.New(reset)}
	}
	resp := &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		st(1, rlsv3.RateLimitResponse_RateLimit_MINUTE, "first", 2, 3*time.Second+900*time.Millisecond),
		{}, // no limit: left out
		st(4, rlsv3.RateLimitResponse_RateLimit_HOUR, "second", 5, 6*time.Second),
		st(7, rlsv3.RateLimitResponse_RateLimit_SECOND, "", 8, time.Second),
	}}
	got := envoysim.XRateLimitHeaders(resp)
	want := []envoysim.Header{{"x-ratelimit-limit", `1, 1;w=60;name="first", 4;w=3600;name="second", 7;w=1`}, {"x-ratelimit-remaining", "2"}, {"x-ratelimit-reset", "3"}}
	if !slices.Equal(got, want) {
		t.Errorf("XRateLimitHeaders = %q, want %q", got, want)
	}
	if got := envoysim.XRateLimitHeaders(&rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{}}}); got != nil {
		t.Errorf("no limit: %q, want none", got)
	}
}
