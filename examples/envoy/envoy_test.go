package envoy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/envoysim"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"

	// Every typed_config "@type" in envoy.yaml must resolve, so each
	// extension it names is linked in (the ones used by name above register
	// themselves too).
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
)

const (
	envoyYAML = "envoy.yaml"
	// internal names the listener of the services of one's own network,
	// where x-internal-key and x-priority are trusted.
	internal  = "internal"
	configDir = "../../config"

	// clientAddress is the address the simulated requests come from; it is
	// what the remote_address action sends.
	clientAddress = "203.0.113.7"
	// authority is the Host of the simulated requests.
	authority = "localhost:10000"
	// configName names config/ in the errors of envoysim.MatchConfig.
	configName = "config/"
)

// sampleHeaders gives the value a simulated request carries for a header
// that a route matches on or a rate limit action reads. A header not listed
// gets "sample-<name>".
var sampleHeaders = map[string]string{
	"x-api-key":      "alice",
	"x-internal-key": "billing",
}

// slotToken is the slot token that Sluice's answer on the request path
// left in the rate limit filter's dynamic metadata, as for an admitted
// request that took a concurrency slot (ratelimit.SlotTokenKey).
const slotToken = "4503599627370"

// newRequest returns a simulated request from clientAddress to authority
// over http, admitted on the request path with a slot token.
func newRequest(path string, headers map[string]string) envoysim.Request {
	return envoysim.Request{Path: path, Headers: headers, Authority: authority, Scheme: "http", ClientAddress: clientAddress,
		DynamicMetadata: map[string]map[string]string{"envoy.filters.http.ratelimit": {ratelimit.SlotTokenKey: slotToken}}}
}

// TestEnvoyYAML checks examples/envoy/envoy.yaml the way Envoy would load it
// (every typed_config resolved, every proto validation rule, including the
// ones inside typed_config), that its pieces are wired to each other, and
// that every descriptor its routes can send has a rule in config/.
func TestEnvoyYAML(t *testing.T) {
	text := readFile(t, envoyYAML)
	b, err := parseBootstrap(text)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("validate", func(t *testing.T) {
		for _, err := range envoysim.ValidateDeep(b, "bootstrap") {
			t.Error(err)
		}
	})
	t.Run("wiring", func(t *testing.T) {
		for _, err := range checkWiring(b) {
			t.Error(err)
		}
	})
	t.Run("the edge removes what clients must not set", func(t *testing.T) {
		for _, err := range checkEdgeTrust(b) {
			t.Error(err)
		}
	})
	t.Run("every descriptor has a rule in config", func(t *testing.T) {
		cfg := loadConfig(t, configDir)
		sent, errs := simulate(b)
		for _, err := range errs {
			t.Error(err)
		}
		for _, err := range envoysim.MatchConfig(cfg, sent, configName) {
			t.Error(err)
		}
	})
	t.Run("descriptor shapes", func(t *testing.T) {
		// The descriptors listed at the top of envoy.yaml and in the README,
		// one for each rule in config/edge.yaml: no more, no fewer.
		want := []string{
			"edge [api_key=<x-api-key>]",
			"edge [api_key=<x-api-key>, route=search]",
			"edge [api_key_internal=<x-internal-key>]",
			"edge [generic_key=beta_upload]",
			"edge [path=<:path>]",
			"edge [remote_address=<client address>]",
			"edge [streams=<x-api-key>]",
			"edge [streams=<x-api-key>, sluice_slot=<metadata envoy.filters.http.ratelimit:sluice_slot>]",
			"edge [token_budget=<x-api-key>]",
			"edge [pool=checkout_db, priority=<x-priority>]",
			"edge [pool=checkout_db]",
		}
		sent, errs := simulate(b)
		for _, err := range errs {
			t.Error(err)
		}
		shapes := map[string]bool{}
		for _, s := range sent {
			shapes[s.Shape()] = true
		}
		got := slices.Sorted(maps.Keys(shapes))
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("descriptor shapes =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
	})
}

// TestEnvoyYAMLRequests pins the descriptors Envoy sends for a few requests,
// the ones the README and the integration scenario rely on, on the edge
// listener unless a case names the internal one.
func TestEnvoyYAMLRequests(t *testing.T) {
	b, err := parseBootstrap(readFile(t, envoyYAML))
	if err != nil {
		t.Fatal(err)
	}
	ca := "remote_address=" + clientAddress
	for _, tc := range []struct {
		name     string
		listener string // "": edge
		path     string
		headers  map[string]string
		want     []string
	}{
		{"keyed search", "", "/v1/search", map[string]string{"x-api-key": "alice"},
			[]string{"[api_key=alice]", "[api_key=alice, route=search]"}},
		{"keyed search below the route", "", "/v1/search/recent", map[string]string{"x-api-key": "alice"},
			[]string{"[api_key=alice]", "[api_key=alice, route=search]"}},
		{"not the search route", "", "/v1/searches", map[string]string{"x-api-key": "alice"},
			[]string{"[api_key=alice]"}},
		{"anonymous search", "", "/v1/search", nil, []string{"[" + ca + "]"}},
		{"internal search", internal, "/v1/search", map[string]string{"x-internal-key": "billing"},
			[]string{"[api_key_internal=billing]"}},
		{"both keys", internal, "/v1/items", map[string]string{"x-api-key": "alice", "x-internal-key": "billing"},
			[]string{"[api_key=alice]", "[api_key_internal=billing]"}},
		// The edge removes a client's x-internal-key: it is anonymous, or
		// limited by its own key.
		{"internal key from a client", "", "/v1/search", map[string]string{"x-internal-key": "billing"}, []string{"[" + ca + "]"}},
		{"internal key beside an api key from a client", "", "/v1/items", map[string]string{"x-api-key": "alice", "x-internal-key": "billing"},
			[]string{"[api_key=alice]"}},
		{"keyed report", "", "/v1/reports/q3.csv", map[string]string{"x-api-key": "bob"},
			[]string{"[api_key=bob]", "[path=/v1/reports/q3.csv]"}},
		{"anonymous report", "", "/v1/reports/q3.csv", nil,
			[]string{"[" + ca + "]", "[path=/v1/reports/q3.csv]"}},
		{"keyed upload", "", "/v1/upload", map[string]string{"x-api-key": "bob"},
			[]string{"[api_key=bob]", "[generic_key=beta_upload]"}},
		{"anonymous upload", "", "/v1/upload", nil, []string{"[" + ca + "]", "[generic_key=beta_upload]"}},
		{"anonymous anything", "", "/", nil, []string{"[" + ca + "]"}},
		{"critical checkout", internal, "/v1/checkout", map[string]string{"x-api-key": "alice", "x-priority": "critical"},
			[]string{"[api_key=alice]", "[pool=checkout_db, priority=critical]"}},
		{"checkout without a class", internal, "/v1/checkout", map[string]string{"x-api-key": "alice"},
			[]string{"[api_key=alice]", "[pool=checkout_db]"}},
		// On the edge every checkout is class default, whatever the client
		// sends.
		{"critical checkout from a client", "", "/v1/checkout", map[string]string{"x-api-key": "alice", "x-priority": "critical"},
			[]string{"[api_key=alice]", "[pool=checkout_db, priority=default]"}},
		{"client checkout without a class", "", "/v1/checkout", map[string]string{"x-api-key": "alice"},
			[]string{"[api_key=alice]", "[pool=checkout_db, priority=default]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest(tc.path, tc.headers)
			sent, err := sendOn(b, tc.listener, req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range sent {
				if s.Domain != "edge" {
					t.Errorf("domain = %q, want edge", s.Domain)
				}
				got = append(got, envoysim.FormatEntries(s.Entries))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("descriptors for %s %v = %v, want %v", tc.path, tc.headers, got, tc.want)
			}
		})
	}
}

// envoyRejects are TestEnvoyYAMLRejects's cases.
var envoyRejects = []struct {
	name string
	// old is replaced by new once, in envoy.yaml or, with inConfig, in
	// config/edge.yaml.
	old, new string
	inConfig bool
	want     string // a substring of one of the reported errors
}{
	// Proto validation (PGV) rules inside typed_config.
	{name: "empty filter domain", old: "domain: edge", new: `domain: ""`,
		want: "RateLimit.Domain"},
	{name: "empty descriptor_key on request_headers", old: "descriptor_key: api_key }", new: `descriptor_key: "" }`,
		want: "RequestHeaders.DescriptorKey"},
	{name: "empty stat_prefix in the connection manager", old: "stat_prefix: edge", new: `stat_prefix: ""`,
		want: "HttpConnectionManager.StatPrefix"},
	{name: "negative connect_timeout outside any typed_config", old: "connect_timeout: 0.25s", new: "connect_timeout: -1s",
		want: "Cluster.ConnectTimeout"},

	// Parsing: a typo or an unknown extension is an error, as in Envoy.
	{name: "unknown field", old: "failure_mode_deny:", new: "failure_mode_deni:",
		want: "unknown field"},
	{name: "unresolvable typed_config", old: "router.v3.Router", new: "router.v3.Routr",
		want: "unable to resolve"},

	// Wiring between the pieces.
	{name: "rate limit service cluster missing", old: "cluster_name: sluice }", new: "cluster_name: sluicee }",
		want: `cluster "sluicee"`},
	{name: "sluice cluster without HTTP/2", old: "http2_protocol_options: {}", new: "http_protocol_options: {}",
		want: "HTTP/2"},
	{name: "v2 transport", old: "transport_api_version: V3", new: "transport_api_version: AUTO",
		want: "transport_api_version"},

	// What a client must not choose.
	{name: "edge keeps a client's internal key", old: "                        - remove: x-internal-key\n", new: "",
		want: "listener edge: x-internal-key from a client reaches Sluice"},
	{name: "edge keeps a client's class", old: "append_action: OVERWRITE_IF_EXISTS_OR_ADD", new: "append_action: ADD_IF_ABSENT",
		want: "listener edge: x-priority from a client reaches Sluice"},
	{name: "no early header mutation", old: "early_header_mutation_extensions:", new: "early_header_mutation_extensionz:",
		want: "unknown field"},

	// Descriptors that config/ has no rule for.
	{name: "empty descriptor_key on generic_key sends generic_key", old: "descriptor_key: route,", new: `descriptor_key: "",`,
		want: "[api_key=alice, generic_key=search] matches no rule"},
	{name: "domain not in config", old: "domain: edge", new: "domain: edge-v2",
		want: `domain "edge-v2": [api_key=alice] matches no rule`},
	{name: "descriptor key not in config", old: "descriptor_key: api_key_internal", new: "descriptor_key: internal_key",
		want: "[internal_key=billing] matches no rule"},
	{name: "descriptor value not in config", old: "descriptor_value: search", new: "descriptor_value: searching",
		want: "[api_key=alice, route=searching] matches no rule"},
	{name: "rule without a limit counts as unmatched", inConfig: true,
		old: "    rate_limit:\n      name: per_client_address\n      unit: minute\n      requests_per_unit: 20\n", new: "",
		want: "[remote_address=" + clientAddress + "] matches rule"},
}

// TestEnvoyYAMLRejects proves the checks above can fail: each case breaks
// envoy.yaml (or config/) the way a person might, and the checks must
// report it.
func TestEnvoyYAMLRejects(t *testing.T) {
	envoyText := string(readFile(t, envoyYAML))
	configText := string(readFile(t, filepath.Join(configDir, "edge.yaml")))

	for _, tc := range envoyRejects {
		t.Run(tc.name, func(t *testing.T) {
			envoyText, configText := envoyText, configText
			target := &envoyText
			if tc.inConfig {
				target = &configText
			}
			if !strings.Contains(*target, tc.old) {
				t.Fatalf("the test case no longer applies: %q not found", tc.old)
			}
			*target = strings.Replace(*target, tc.old, tc.new, 1)

			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(configText), 0o644); err != nil {
				t.Fatal(err)
			}
			errs := checkAll([]byte(envoyText), loadConfig(t, dir))
			if len(errs) == 0 {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("errors = %v, want one containing %q", errors.Join(errs...), tc.want)
		})
	}
}

// checkAll runs every check of TestEnvoyYAML on text and returns what they
// report.
func checkAll(text []byte, cfg *descriptors.Config) []error {
	b, err := parseBootstrap(text)
	if err != nil {
		return []error{err}
	}
	errs := envoysim.ValidateDeep(b, "bootstrap")
	errs = append(errs, checkWiring(b)...)
	errs = append(errs, checkEdgeTrust(b)...)
	sent, simErrs := simulate(b)
	errs = append(errs, simErrs...)
	return append(errs, envoysim.MatchConfig(cfg, sent, configName)...)
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadConfig(t *testing.T, dir string) *descriptors.Config {
	t.Helper()
	cfg, err := descriptors.Load(dir)
	if err != nil {
		t.Fatalf("descriptors.Load(%q): %v", dir, err)
	}
	return cfg
}

// parseBootstrap converts Envoy YAML into the Bootstrap proto the way Envoy
// does: YAML to JSON, then the proto JSON mapping, which rejects unknown
// fields and any typed_config whose "@type" is not linked in.
func parseBootstrap(text []byte) (*bootstrapv3.Bootstrap, error) {
	var doc any
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("convert YAML to JSON: %w", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		return nil, fmt.Errorf("convert to Bootstrap: %w", err)
	}
	return b, nil
}

// rateLimitFilter is one envoy.filters.http.ratelimit filter and the
// connection manager it sits in.
type rateLimitFilter struct {
	listener string
	hcm      *hcmv3.HttpConnectionManager
	filter   *ratelimitv3.RateLimit
}

// rateLimitFilters returns the rate limit filters of every HTTP connection
// manager in b, with the errors of unpacking them.
func rateLimitFilters(b *bootstrapv3.Bootstrap) ([]rateLimitFilter, []error) {
	var out []rateLimitFilter
	var errs []error
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if !f.GetTypedConfig().MessageIs(hcm) {
					continue
				}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					errs = append(errs, fmt.Errorf("listener %s: %w", l.GetName(), err))
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					rl := &ratelimitv3.RateLimit{}
					if !hf.GetTypedConfig().MessageIs(rl) {
						continue
					}
					if err := hf.GetTypedConfig().UnmarshalTo(rl); err != nil {
						errs = append(errs, fmt.Errorf("listener %s: filter %s: %w", l.GetName(), hf.GetName(), err))
						continue
					}
					out = append(out, rateLimitFilter{listener: l.GetName(), hcm: hcm, filter: rl})
				}
			}
		}
	}
	return out, errs
}

// checkWiring checks what no proto rule can: that the rate limit filter
// comes before the router, reaches an existing cluster over gRPC (HTTP/2)
// with the v3 API, and that every route's cluster exists.
func checkWiring(b *bootstrapv3.Bootstrap) []error {
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	rls, errs := rateLimitFilters(b)
	if len(rls) == 0 {
		errs = append(errs, errors.New("no envoy.filters.http.ratelimit filter in any listener"))
	}
	for _, rl := range rls {
		where := "listener " + rl.listener
		filters := rl.hcm.GetHttpFilters()
		last := filters[len(filters)-1]
		if !last.GetTypedConfig().MessageIs(&routerv3.Router{}) {
			errs = append(errs, fmt.Errorf("%s: last HTTP filter is %s, want the router", where, last.GetName()))
		}

		svc := rl.filter.GetRateLimitService()
		if v := svc.GetTransportApiVersion(); v != corev3.ApiVersion_V3 {
			errs = append(errs, fmt.Errorf("%s: rate_limit_service.transport_api_version = %v, want V3", where, v))
		}
		name := svc.GetGrpcService().GetEnvoyGrpc().GetClusterName()
		c, ok := clusters[name]
		switch {
		case name == "":
			errs = append(errs, fmt.Errorf("%s: rate_limit_service names no envoy_grpc cluster", where))
		case !ok:
			errs = append(errs, fmt.Errorf("%s: rate_limit_service: no cluster %q", where, name))
		case !speaksHTTP2(c):
			errs = append(errs, fmt.Errorf("%s: rate limit cluster %q must use HTTP/2 for gRPC (explicit_http_config.http2_protocol_options)", where, name))
		}

		if rl.hcm.GetRds() != nil {
			errs = append(errs, fmt.Errorf("%s: routes come from RDS; this test checks an inline route_config", where))
		}
		for _, vh := range rl.hcm.GetRouteConfig().GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if c := r.GetRoute().GetCluster(); c != "" && clusters[c] == nil {
					errs = append(errs, fmt.Errorf("%s: route %s: no cluster %q", where, r.GetName(), c))
				}
			}
		}
	}
	return errs
}

func speaksHTTP2(c *clusterv3.Cluster) bool {
	opts := &upstreamhttpv3.HttpProtocolOptions{}
	a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if a == nil || a.UnmarshalTo(opts) != nil {
		return false
	}
	return opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
}

// simulate sends sample requests through every rate limit filter's routes:
// each path a route matches, with every combination of the headers that the
// routes match on or read. It returns every descriptor sent, and an error
// for a route no sample reaches (its rate_limits would go unchecked) or a
// config it cannot simulate.
func simulate(b *bootstrapv3.Bootstrap) ([]envoysim.Descriptor, []error) {
	rls, errs := rateLimitFilters(b)
	var out []envoysim.Descriptor
	for _, rl := range rls {
		vhs := rl.hcm.GetRouteConfig().GetVirtualHosts()
		samples, err := sampleRequests(rl, sampleHeaders)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		reached := map[string]bool{}
		for _, req := range samples {
			route, ds, err := route(rl, req)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if route == nil {
				continue
			}
			reached[route.GetName()] = true
			out = append(out, ds...)
		}
		for _, vh := range vhs {
			for _, r := range vh.GetRoutes() {
				if !reached[r.GetName()] {
					errs = append(errs, fmt.Errorf("listener %s: route %q: no sample request reaches it, so its rate_limits are unchecked", rl.listener, r.GetName()))
				}
			}
		}
	}
	return out, errs
}

// sampleRequests returns the sample requests of rl's routes: each path a
// route matches, with every combination of the headers that the routes
// match on or read, carrying values (envoysim.SampleRequests).
func sampleRequests(rl rateLimitFilter, values map[string]string) ([]envoysim.Request, error) {
	paths := map[string]bool{"/": true}
	names := map[string]bool{}
	for _, vh := range rl.hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			m := r.GetMatch()
			switch {
			case m.GetPrefix() != "":
				paths[m.GetPrefix()] = true
				paths[strings.TrimSuffix(m.GetPrefix(), "/")+"/sample"] = true
			case m.GetPathSeparatedPrefix() != "":
				paths[m.GetPathSeparatedPrefix()] = true
				paths[m.GetPathSeparatedPrefix()+"/sample"] = true
			case m.GetPath() != "":
				paths[m.GetPath()] = true
			}
			for _, h := range m.GetHeaders() {
				names[strings.ToLower(h.GetName())] = true
			}
			for _, lim := range r.GetRoute().GetRateLimits() {
				for _, a := range lim.GetActions() {
					if n := a.GetRequestHeaders().GetHeaderName(); n != "" && !strings.HasPrefix(n, ":") {
						names[strings.ToLower(n)] = true
					}
				}
			}
		}
	}
	headerNames := slices.Sorted(maps.Keys(names))
	if len(headerNames) > 8 {
		return nil, fmt.Errorf("listener %s: %d headers make too many combinations to simulate", rl.listener, len(headerNames))
	}
	return envoysim.SampleRequests(newRequest("", nil), slices.Sorted(maps.Keys(paths)), headerNames, values), nil
}

// trustedHeaders are the headers only the internal network may set: a
// client's x-internal-key would skip every limit, its x-priority would pick
// a pool's class (critical takes the reserve).
var trustedHeaders = []string{"x-internal-key", "x-priority"}

// checkEdgeTrust sends, on every listener but the internal one, every
// sample request with each trusted header forged by the client, and
// reports a descriptor that carries a forged value or an internal key: the
// edge must remove or overwrite those headers before routing.
func checkEdgeTrust(b *bootstrapv3.Bootstrap) []error {
	const forged = "forged-by-client"
	values := maps.Clone(sampleHeaders)
	for _, h := range trustedHeaders {
		values[h] = forged
	}
	rls, errs := rateLimitFilters(b)
	for _, rl := range rls {
		if rl.listener == internal {
			continue
		}
		samples, err := sampleRequests(rl, values)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		bad := map[string]bool{}
		for _, req := range samples {
			_, ds, err := route(rl, req)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, d := range ds {
				for _, e := range d.Entries {
					if (e.Value == forged || e.Key == "api_key_internal") && !bad[e.Source] {
						bad[e.Source] = true
						errs = append(errs, fmt.Errorf("listener %s: %s from a client reaches Sluice (%s on route %s, for %v): "+
							"remove or overwrite it in early_header_mutation_extensions", rl.listener, e.Source, envoysim.FormatEntries(d.Entries), d.Route, req))
					}
				}
			}
		}
	}
	return errs
}

// sendFor returns the descriptors Envoy sends for req through the first
// rate limit filter of b: the edge listener's.
func sendFor(b *bootstrapv3.Bootstrap, req envoysim.Request) ([]envoysim.Descriptor, error) {
	return sendOn(b, "", req)
}

// sendOn returns the descriptors Envoy sends for req through the rate limit
// filter of the listener named listener ("": the first).
func sendOn(b *bootstrapv3.Bootstrap, listener string, req envoysim.Request) ([]envoysim.Descriptor, error) {
	rls, errs := rateLimitFilters(b)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, rl := range rls {
		if listener == "" || rl.listener == listener {
			_, ds, err := route(rl, req)
			return ds, err
		}
	}
	return nil, fmt.Errorf("no rate limit filter on listener %q", listener)
}

// route finds the route Envoy picks for req (nil if none) and the
// descriptors the filter sends for it, in the order of its rate_limits,
// after the connection manager's early header mutations (which run before
// routing).
func route(rl rateLimitFilter, req envoysim.Request) (*routev3.Route, []envoysim.Descriptor, error) {
	if len(rl.filter.GetRateLimits()) > 0 {
		return nil, nil, fmt.Errorf("listener %s: filter-level rate_limits are not simulated; put them on routes", rl.listener)
	}
	req, err := envoysim.EarlyHeaderMutations(rl.hcm.GetEarlyHeaderMutationExtensions(), req)
	if err != nil {
		return nil, nil, fmt.Errorf("listener %s: %w", rl.listener, err)
	}
	for _, vh := range rl.hcm.GetRouteConfig().GetVirtualHosts() {
		if !slices.Contains(vh.GetDomains(), "*") && !slices.Contains(vh.GetDomains(), authority) {
			continue
		}
		if len(vh.GetRateLimits()) > 0 {
			return nil, nil, fmt.Errorf("virtual host %s: virtual host rate_limits are not simulated; put them on routes", vh.GetName())
		}
		for _, r := range vh.GetRoutes() {
			ok, err := routeMatches(r.GetMatch(), req)
			if err != nil {
				return nil, nil, fmt.Errorf("route %q: %w", r.GetName(), err)
			}
			if !ok {
				continue
			}
			if _, ok := r.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"]; ok {
				return nil, nil, fmt.Errorf("route %q: per-route rate limit config is not simulated", r.GetName())
			}
			var out []envoysim.Descriptor
			for i, lim := range r.GetRoute().GetRateLimits() {
				if lim.GetStage().GetValue() != rl.filter.GetStage() {
					continue
				}
				if lim.GetLimit() != nil {
					return nil, nil, fmt.Errorf("route %q: rate_limits[%d]: limit overrides are not simulated", r.GetName(), i)
				}
				es, ok, err := envoysim.Entries(lim.GetActions(), req)
				if err != nil {
					return nil, nil, fmt.Errorf("route %q: rate_limits[%d]: %w", r.GetName(), i, err)
				}
				if ok && len(es) > 0 {
					d := envoysim.Descriptor{Req: req, Route: r.GetName(), Domain: rl.filter.GetDomain(), Entries: es,
						StreamDone: lim.GetApplyOnStreamDone(), NegativeHits: lim.GetHitsAddend().GetIsNegativeHits()}
					switch ha := lim.GetHitsAddend(); {
					case ha.GetNumber() != nil:
						d.HitsAddend = strconv.FormatUint(ha.GetNumber().GetValue(), 10)
					case ha.GetFormat() != "":
						d.HitsAddend = ha.GetFormat()
					}
					out = append(out, d)
				}
			}
			return r, out, nil
		}
		return nil, nil, nil
	}
	return nil, nil, nil
}

func routeMatches(m *routev3.RouteMatch, req envoysim.Request) (bool, error) {
	if len(m.GetQueryParameters()) > 0 || m.GetRuntimeFraction() != nil || m.GetGrpc() != nil ||
		len(m.GetCookies()) > 0 || len(m.GetDynamicMetadata()) > 0 || len(m.GetFilterState()) > 0 || m.GetTlsContext() != nil {
		return false, errors.New("match conditions other than path and headers are not simulated")
	}
	path, fold := req.Path, m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue()
	eq := func(a, b string) bool { return a == b || fold && strings.EqualFold(a, b) }
	var ok bool
	switch spec := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		ok = len(path) >= len(spec.Prefix) && eq(path[:len(spec.Prefix)], spec.Prefix)
	case *routev3.RouteMatch_Path:
		ok = eq(path, spec.Path)
	case *routev3.RouteMatch_PathSeparatedPrefix:
		p := spec.PathSeparatedPrefix
		ok = eq(path, p) || len(path) > len(p) && eq(path[:len(p)], p) && (path[len(p)] == '/' || path[len(p)] == '?')
	default:
		return false, fmt.Errorf("path specifier %T is not simulated", spec)
	}
	if !ok {
		return false, nil
	}
	return envoysim.HeadersMatch(m.GetHeaders(), req)
}

// TestEnvoyYAMLUsageRoutes: the chat route checks the key's token budget on
// the request path (hits 0) and reports x-tokens-used when the stream ends;
// the stream route acquires a slot and releases it at the stream's end.
// config/ has an overdraw budget and a concurrency limit for them.
func TestEnvoyYAMLUsageRoutes(t *testing.T) {
	b, err := parseBootstrap(readFile(t, envoyYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptors.Load(configDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want []string // entries, hits_addend, negative, stream done
	}{
		{"/v1/chat", []string{"[api_key=alice] hits= negative=false done=false", "[token_budget=alice] hits=0 negative=false done=false",
			"[token_budget=alice] hits=%RESP(x-tokens-used)% negative=false done=true"}},
		{"/v1/stream", []string{"[api_key=alice] hits= negative=false done=false", "[streams=alice] hits= negative=false done=false",
			"[streams=alice, sluice_slot=" + slotToken + "] hits=1 negative=true done=true"}},
	} {
		sent, err := sendFor(b, newRequest(tc.path, map[string]string{"x-api-key": "alice"}))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range sent {
			got = append(got, fmt.Sprintf("%s hits=%s negative=%v done=%v", envoysim.FormatEntries(d.Entries), d.HitsAddend, d.NegativeHits, d.StreamDone))
			es := envoysim.Matched(d.Entries)
			r := cfg.Match("edge", es)
			switch {
			case r == nil || r.Limit == nil:
				t.Errorf("%s: %v matches no limit in config/", tc.path, es)
			case d.Entries[0].Key == "api_key":
			case tc.path == "/v1/chat" && (r.Limit.Overdraw == nil || !*r.Limit.Overdraw):
				t.Errorf("%s: the token budget rule %s does not overdraw: a report over the budget would not count", tc.path, r.FullKey)
			case tc.path == "/v1/stream" && r.Limit.Algorithm != limiter.Concurrency:
				t.Errorf("%s: rule %s counts with %v, want concurrency", tc.path, r.FullKey, r.Limit.Algorithm)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("descriptors for %s = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// TestEnvoyYAMLReleasesSendTheSlotToken: every release of a concurrency
// limit (sent when the stream ends, is_negative_hits) carries the slot token
// of its request as its last entry, read from the rate limit filter's
// dynamic metadata, so that it frees that request's slot only; and a
// request that got no token (denied, or answered by the failure mode)
// sends no release at all.
func TestEnvoyYAMLReleasesSendTheSlotToken(t *testing.T) {
	b, err := parseBootstrap(readFile(t, envoyYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, configDir)
	sent, errs := simulate(b)
	for _, err := range errs {
		t.Error(err)
	}
	releases := 0
	for _, d := range sent {
		r := cfg.Match(d.Domain, envoysim.Matched(d.Entries))
		if !d.StreamDone || !d.NegativeHits || r == nil || r.Limit == nil || !r.Limit.Algorithm.Traits().InFlight {
			continue
		}
		releases++
		last := d.Entries[len(d.Entries)-1]
		if last.Key != ratelimit.SlotTokenKey || last.Source != "metadata envoy.filters.http.ratelimit:"+ratelimit.SlotTokenKey {
			t.Errorf("route %q: the release %s of rule %s does not end with the slot token from the rate limit filter's dynamic metadata",
				d.Route, envoysim.FormatEntries(d.Entries), r.FullKey)
		}
		denied := d.Req
		denied.DynamicMetadata = nil
		if ds, err := sendFor(b, denied); err != nil {
			t.Fatal(err)
		} else {
			for _, x := range ds {
				if x.StreamDone && x.NegativeHits && slices.Equal(envoysim.Matched(x.Entries), envoysim.Matched(d.Entries)) {
					t.Errorf("route %q: a request without a slot token (denied) still sends the release %s", d.Route, envoysim.FormatEntries(x.Entries))
				}
			}
		}
	}
	if releases == 0 {
		t.Error("no route releases a concurrency slot: the example should show how")
	}
}
