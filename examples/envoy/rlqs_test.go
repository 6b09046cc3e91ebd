package envoy_test

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	networkinputsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/network/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/envoysim"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/rlqs"
)

const envoyRLQSYAML = "envoy-rlqs.yaml"

// TestEnvoyRLQSYAML checks examples/envoy/envoy-rlqs.yaml as Envoy would
// load it (every typed_config, the bucket settings inside the matchers
// included, against every proto validation rule), its wiring, and replays
// its bucket matchers on the demo's requests: each request lands in the
// buckets the file's header lists, and each bucket id matches, by Sluice's
// key order (rlqs.Match), the rule of config/ that envoy.yaml's descriptor
// for the same request matches.
func TestEnvoyRLQSYAML(t *testing.T) {
	for _, err := range checkQuotaAll(readFile(t, envoyRLQSYAML), loadConfig(t, configDir)) {
		t.Error(err)
	}
	b, err := parseBootstrap(readFile(t, envoyRLQSYAML))
	if err != nil {
		t.Fatal(err)
	}
	filters, errs := quotaFilters(b)
	if len(errs) > 0 || len(filters) != 2 {
		t.Fatalf("rate_limit_quota filters = %d, %v; want who and route", len(filters), errs)
	}
	cfg := loadConfig(t, configDir)
	ca := "remote_address=" + clientAddress
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		want    []string // per filter: "{bucket} rule", "" when not limited
	}{
		{"keyed search", "/v1/search", map[string]string{"x-api-key": "alice"},
			[]string{"{api_key=alice} per_api_key", "{api_key=alice, route=search} search_per_api_key"}},
		{"keyed search below the route", "/v1/search/recent?q=1", map[string]string{"x-api-key": "alice"},
			[]string{"{api_key=alice} per_api_key", "{api_key=alice, route=search} search_per_api_key"}},
		{"not the search route", "/v1/searches", map[string]string{"x-api-key": "alice"}, []string{"{api_key=alice} per_api_key", ""}},
		{"anonymous search", "/v1/search", nil, []string{"{" + ca + "} per_client_address", ""}},
		// This listener faces clients only: an x-internal-key is no
		// bypass, the request is limited by its address.
		{"client-sent internal key", "/v1/search", map[string]string{"x-internal-key": "billing"},
			[]string{"{" + ca + "} per_client_address", ""}},
		{"both keys", "/v1/items", map[string]string{"x-api-key": "alice", "x-internal-key": "billing"},
			[]string{"{api_key=alice} per_api_key", ""}},
		{"keyed report", "/v1/reports/q3.csv", map[string]string{"x-api-key": "bob"},
			[]string{"{api_key=bob} per_api_key", "{path=/v1/reports/q3.csv} reports_shared"}},
		{"anonymous upload", "/v1/upload", nil,
			[]string{"{" + ca + "} per_client_address", "{generic_key=beta_upload} beta_upload_trial (shadow mode)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest(tc.path, tc.headers)
			for i, f := range filters {
				id, err := bucketFor(f.cfg, req)
				if err != nil {
					t.Fatal(err)
				}
				if got := describeBucket(cfg, f.cfg.GetDomain(), id); got != tc.want[i] {
					t.Errorf("filter %s: %s, want %s", f.name, got, tc.want[i])
				}
			}
		})
	}
}

// TestEnvoyRLQSYAMLRejects proves the checks can fail: each case breaks
// envoy-rlqs.yaml the way a person might.
func TestEnvoyRLQSYAMLRejects(t *testing.T) {
	text := string(readFile(t, envoyRLQSYAML))
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"reporting interval under Envoy's 100 ms", "reporting_interval: 1s", "reporting_interval: 0.05s", "ReportingInterval"},
		{"empty domain", "domain: edge", `domain: ""`, "RateLimitQuotaFilterConfig.Domain"},
		{"unknown extension", "RateLimitQuotaBucketSettings", "RateLimitQuotaBucketSetting", "unable to resolve"},
		{"quota server cluster missing", "cluster_name: sluice }", "cluster_name: sluicee }", `cluster "sluicee"`},
		{"bucket key not in config", "api_key: { custom_value: *api_key_header }", "apikey: { custom_value: *api_key_header }",
			"{apikey=alice} matches no rule"},
		{"route value not in config", "route: { string_value: search }", "route: { string_value: searching }",
			"{api_key=alice, route=searching} matches no rule"},
		{"domain not in config", "domain: edge", "domain: edge-v2", `domain "edge-v2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(text, tc.old) {
				t.Fatalf("the test case no longer applies: %q not found", tc.old)
			}
			errs := checkQuotaAll([]byte(strings.Replace(text, tc.old, tc.new, 1)), loadConfig(t, configDir))
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("errors = %v, want one containing %q", errors.Join(errs...), tc.want)
		})
	}
}

// quotaSamples are requests that reach every matcher of envoy-rlqs.yaml.
var quotaSamples = []envoysim.Request{
	newRequest("/v1/search", map[string]string{"x-api-key": "alice"}),
	newRequest("/v1/items", map[string]string{"x-internal-key": "billing"}),
	newRequest("/v1/items", nil),
	newRequest("/v1/reports/q3.csv", nil),
	newRequest("/v1/upload", nil),
}

// checkQuotaAll runs every check of TestEnvoyRLQSYAML on text: parsing,
// validation, wiring, and that the buckets of quotaSamples match rules.
func checkQuotaAll(text []byte, cfg *descriptors.Config) []error {
	b, err := parseBootstrap(text)
	if err != nil {
		return []error{err}
	}
	errs := envoysim.ValidateDeep(b, "bootstrap")
	filters, ferrs := quotaFilters(b)
	errs = append(errs, ferrs...)
	errs = append(errs, checkQuotaWiring(b, filters)...)
	for _, f := range filters {
		for _, req := range quotaSamples {
			id, err := bucketFor(f.cfg, req)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("filter %s: %s: %w", f.name, req, err))
			case id == nil:
			case cfg.Domain(f.cfg.GetDomain()) == nil:
				errs = append(errs, fmt.Errorf("filter %s: domain %q is in no file of %s", f.name, f.cfg.GetDomain(), configName))
			default:
				if _, rule := rlqs.Match(cfg, f.cfg.GetDomain(), id); rule == nil {
					errs = append(errs, fmt.Errorf("filter %s: %s: bucket %s matches no rule in %s", f.name, req, formatBucket(id), configName))
				}
			}
		}
	}
	return errs
}

// quotaFilter is one rate_limit_quota filter of envoy-rlqs.yaml.
type quotaFilter struct {
	name string
	cfg  *rlqfilterv3.RateLimitQuotaFilterConfig
	hcm  *hcmv3.HttpConnectionManager
}

func quotaFilters(b *bootstrapv3.Bootstrap) ([]quotaFilter, []error) {
	var out []quotaFilter
	var errs []error
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(hcm) != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					q := &rlqfilterv3.RateLimitQuotaFilterConfig{}
					if !hf.GetTypedConfig().MessageIs(q) {
						continue
					}
					if err := hf.GetTypedConfig().UnmarshalTo(q); err != nil {
						errs = append(errs, fmt.Errorf("filter %s: %w", hf.GetName(), err))
						continue
					}
					out = append(out, quotaFilter{name: hf.GetName(), cfg: q, hcm: hcm})
				}
			}
		}
	}
	if len(out) == 0 {
		errs = append(errs, errors.New("no rate_limit_quota filter in any listener"))
	}
	return out, errs
}

// checkQuotaWiring: each quota filter reaches an existing HTTP/2 cluster
// and comes before the router.
func checkQuotaWiring(b *bootstrapv3.Bootstrap, filters []quotaFilter) []error {
	var errs []error
	for _, f := range filters {
		name := f.cfg.GetRlqsServer().GetEnvoyGrpc().GetClusterName()
		var c bool
		for _, cl := range b.GetStaticResources().GetClusters() {
			if cl.GetName() == name {
				c = true
				if !speaksHTTP2(cl) {
					errs = append(errs, fmt.Errorf("filter %s: cluster %q must use HTTP/2 for gRPC", f.name, name))
				}
			}
		}
		if !c {
			errs = append(errs, fmt.Errorf("filter %s: rlqs_server: no cluster %q", f.name, name))
		}
		hf := f.hcm.GetHttpFilters()
		if !hf[len(hf)-1].GetTypedConfig().MessageIs(&routerv3.Router{}) {
			errs = append(errs, fmt.Errorf("filter %s: the router is not the last HTTP filter", f.name))
		}
	}
	return errs
}

// bucketFor replays a filter's bucket_matchers on req as Envoy does (the
// first matcher whose predicate holds, else on_no_match) and builds the
// bucket id; nil when no matcher applies (the request is not limited).
func bucketFor(f *rlqfilterv3.RateLimitQuotaFilterConfig, req envoysim.Request) (map[string]string, error) {
	m := f.GetBucketMatchers()
	var action *xdscorev3.TypedExtensionConfig
	for _, fm := range m.GetMatcherList().GetMatchers() {
		ok, err := holds(fm.GetPredicate(), req)
		if err != nil {
			return nil, err
		}
		if ok {
			action = fm.GetOnMatch().GetAction()
			break
		}
	}
	if action == nil {
		action = m.GetOnNoMatch().GetAction()
	}
	if action == nil {
		return nil, nil
	}
	settings := &rlqfilterv3.RateLimitQuotaBucketSettings{}
	if err := action.GetTypedConfig().UnmarshalTo(settings); err != nil {
		return nil, fmt.Errorf("action %s: %w", action.GetName(), err)
	}
	id := map[string]string{}
	for k, vb := range settings.GetBucketIdBuilder().GetBucketIdBuilder() {
		if vb.GetCustomValue() == nil {
			id[k] = vb.GetStringValue()
			continue
		}
		v, ok, err := input(vb.GetCustomValue().GetTypedConfig(), req)
		if err != nil || !ok {
			return nil, fmt.Errorf("bucket key %s: no value (%v)", k, err)
		}
		id[k] = v
	}
	return id, nil
}

// holds evaluates a matcher predicate: single predicates on request
// headers or the source address with exact, prefix or (full-match) regex
// values, and and/or/not of them. A missing input does not match.
func holds(p *xdsmatcherv3.Matcher_MatcherList_Predicate, req envoysim.Request) (bool, error) {
	switch {
	case p.GetSinglePredicate() != nil:
		sp := p.GetSinglePredicate()
		v, ok, err := input(sp.GetInput().GetTypedConfig(), req)
		if err != nil || !ok {
			return false, err
		}
		sm := sp.GetValueMatch()
		switch {
		case sm.GetExact() != "":
			return v == sm.GetExact(), nil
		case sm.GetPrefix() != "":
			return strings.HasPrefix(v, sm.GetPrefix()), nil
		case sm.GetSafeRegex() != nil:
			re, err := regexp.Compile("^(?:" + sm.GetSafeRegex().GetRegex() + ")$")
			return err == nil && re.MatchString(v), err
		}
		return false, fmt.Errorf("value_match %v: not simulated", sm)
	case p.GetAndMatcher() != nil:
		for _, q := range p.GetAndMatcher().GetPredicate() {
			if ok, err := holds(q, req); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	case p.GetOrMatcher() != nil:
		for _, q := range p.GetOrMatcher().GetPredicate() {
			if ok, err := holds(q, req); ok || err != nil {
				return ok, err
			}
		}
		return false, nil
	case p.GetNotMatcher() != nil:
		ok, err := holds(p.GetNotMatcher(), req)
		return !ok, err
	}
	return false, fmt.Errorf("predicate %v: not simulated", p)
}

// input reads a matching input from req: a request header or the source
// address.
func input(in *anypb.Any, req envoysim.Request) (string, bool, error) {
	h := &matcherv3.HttpRequestHeaderMatchInput{}
	if in.MessageIs(h) {
		if err := in.UnmarshalTo(h); err != nil {
			return "", false, err
		}
		v, ok := req.Header(h.GetHeaderName())
		return v, ok, nil
	}
	if in.MessageIs(&networkinputsv3.SourceIPInput{}) {
		return req.ClientAddress, true, nil
	}
	return "", false, fmt.Errorf("input %s: not simulated", in.GetTypeUrl())
}

// describeBucket renders a bucket id and the rule it matches: "{k=v, ...}
// name", "unlimited", "(shadow mode)"; "" for no bucket.
func describeBucket(cfg *descriptors.Config, domain string, id map[string]string) string {
	if id == nil {
		return ""
	}
	_, r := rlqs.Match(cfg, domain, id)
	switch {
	case r == nil:
		return formatBucket(id) + " matches no rule"
	case r.Unlimited:
		return formatBucket(id) + " unlimited"
	case r.Limit == nil:
		return formatBucket(id) + " no limit"
	case r.ShadowMode:
		return formatBucket(id) + " " + r.Limit.Name + " (shadow mode)"
	}
	return formatBucket(id) + " " + r.Limit.Name
}

func formatBucket(id map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(id)) {
		parts = append(parts, k+"="+id[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
