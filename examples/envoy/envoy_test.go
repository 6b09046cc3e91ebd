package envoy_test

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
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
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/pkg/descriptors"

	// Every typed_config "@type" in envoy.yaml must resolve, so each
	// extension it names is linked in (the ones used by name above register
	// themselves too).
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
)

const (
	envoyYAML = "envoy.yaml"
	configDir = "../../config"

	// clientAddress is the address the simulated requests come from; it is
	// what the remote_address action sends.
	clientAddress = "203.0.113.7"
	// authority is the Host of the simulated requests.
	authority = "localhost:10000"
)

// sampleHeaders gives the value a simulated request carries for a header
// that a route matches on or a rate limit action reads. A header not listed
// gets "sample-<name>".
var sampleHeaders = map[string]string{
	"x-api-key":      "alice",
	"x-internal-key": "billing",
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
		for _, err := range validateTree(b) {
			t.Error(err)
		}
	})
	t.Run("wiring", func(t *testing.T) {
		for _, err := range checkWiring(b) {
			t.Error(err)
		}
	})
	t.Run("every descriptor has a rule in config", func(t *testing.T) {
		cfg := loadConfig(t, configDir)
		sent, errs := simulate(b)
		for _, err := range errs {
			t.Error(err)
		}
		for _, err := range matchConfig(cfg, sent) {
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
		}
		sent, errs := simulate(b)
		for _, err := range errs {
			t.Error(err)
		}
		shapes := map[string]bool{}
		for _, s := range sent {
			shapes[s.shape()] = true
		}
		got := slices.Sorted(maps.Keys(shapes))
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("descriptor shapes =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
	})
}

// TestEnvoyYAMLRequests pins the descriptors Envoy sends for a few requests,
// the ones the README and the integration scenario rely on.
func TestEnvoyYAMLRequests(t *testing.T) {
	b, err := parseBootstrap(readFile(t, envoyYAML))
	if err != nil {
		t.Fatal(err)
	}
	ca := "remote_address=" + clientAddress
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		want    []string
	}{
		{"keyed search", "/v1/search", map[string]string{"x-api-key": "alice"},
			[]string{"[api_key=alice]", "[api_key=alice, route=search]"}},
		{"keyed search below the route", "/v1/search/recent", map[string]string{"x-api-key": "alice"},
			[]string{"[api_key=alice]", "[api_key=alice, route=search]"}},
		{"not the search route", "/v1/searches", map[string]string{"x-api-key": "alice"},
			[]string{"[api_key=alice]"}},
		{"anonymous search", "/v1/search", nil, []string{"[" + ca + "]"}},
		{"internal search", "/v1/search", map[string]string{"x-internal-key": "billing"},
			[]string{"[api_key_internal=billing]"}},
		{"both keys", "/v1/items", map[string]string{"x-api-key": "alice", "x-internal-key": "billing"},
			[]string{"[api_key=alice]", "[api_key_internal=billing]"}},
		{"keyed report", "/v1/reports/q3.csv", map[string]string{"x-api-key": "bob"},
			[]string{"[api_key=bob]", "[path=/v1/reports/q3.csv]"}},
		{"anonymous report", "/v1/reports/q3.csv", nil,
			[]string{"[" + ca + "]", "[path=/v1/reports/q3.csv]"}},
		{"keyed upload", "/v1/upload", map[string]string{"x-api-key": "bob"},
			[]string{"[api_key=bob]", "[generic_key=beta_upload]"}},
		{"anonymous upload", "/v1/upload", nil, []string{"[" + ca + "]", "[generic_key=beta_upload]"}},
		{"anonymous anything", "/", nil, []string{"[" + ca + "]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := request{path: tc.path, headers: tc.headers}
			sent, err := sendFor(b, req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range sent {
				if s.domain != "edge" {
					t.Errorf("domain = %q, want edge", s.domain)
				}
				got = append(got, formatEntries(s.entries))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("descriptors for %s %v = %v, want %v", tc.path, tc.headers, got, tc.want)
			}
		})
	}
}

// TestEnvoyYAMLRejects proves the checks above can fail: each case breaks
// envoy.yaml (or config/) the way a person might, and the checks must
// report it.
func TestEnvoyYAMLRejects(t *testing.T) {
	envoyText := string(readFile(t, envoyYAML))
	configText := string(readFile(t, filepath.Join(configDir, "edge.yaml")))

	for _, tc := range []struct {
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
	} {
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
	errs := validateTree(b)
	errs = append(errs, checkWiring(b)...)
	sent, simErrs := simulate(b)
	errs = append(errs, simErrs...)
	return append(errs, matchConfig(cfg, sent)...)
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

// validator is what protoc-gen-validate generates on every Envoy message.
type validator interface{ ValidateAll() error }

// validateTree runs ValidateAll on b and on the message inside every
// anypb.Any under it, recursively: ValidateAll checks an Any's type URL
// only, never what it holds.
func validateTree(b *bootstrapv3.Bootstrap) []error {
	return validateMessage(b, "bootstrap")
}

func validateMessage(m proto.Message, path string) []error {
	var errs []error
	v, ok := m.(validator)
	if !ok {
		return []error{fmt.Errorf("%s: %s has no ValidateAll", path, m.ProtoReflect().Descriptor().FullName())}
	}
	if err := v.ValidateAll(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	return append(errs, validateAnys(m.ProtoReflect(), path)...)
}

// validateAnys finds every Any under m and validates what it holds.
func validateAnys(m protoreflect.Message, path string) []error {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return []error{fmt.Errorf("%s: unpack %s: %w", path, a.GetTypeUrl(), err)}
		}
		return validateMessage(inner, fmt.Sprintf("%s(%s)", path, inner.ProtoReflect().Descriptor().Name()))
	}
	var errs []error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				errs = append(errs, validateAnys(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i))...)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				errs = append(errs, validateAnys(mv.Message(), fmt.Sprintf("%s[%v]", p, k.Interface()))...)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			errs = append(errs, validateAnys(v.Message(), p)...)
		}
		return true
	})
	return errs
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

// request is a simulated downstream request.
type request struct {
	path    string
	headers map[string]string // lower-case names, no pseudo-headers
}

// header returns the value Envoy would see for name, pseudo-headers
// included.
func (r request) header(name string) (string, bool) {
	switch name {
	case ":path":
		return r.path, true
	case ":method":
		return "GET", true
	case ":authority", "host":
		return authority, true
	case ":scheme":
		return "http", true
	}
	v, ok := r.headers[strings.ToLower(name)]
	return v, ok
}

func (r request) String() string {
	keys := slices.Sorted(maps.Keys(r.headers))
	var b strings.Builder
	b.WriteString("GET " + r.path)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s:%s", k, r.headers[k])
	}
	return b.String()
}

// entry is a descriptor entry with where its value came from.
type entry struct {
	descriptors.Entry
	source string // "" for a fixed value, else a header name or "client address"
}

// sent is one descriptor that Envoy sends for a request.
type sent struct {
	req     request
	route   string
	domain  string
	entries []entry
}

// shape names the descriptor with request-derived values replaced by their
// source, e.g. "edge [api_key=<x-api-key>, route=search]".
func (s sent) shape() string {
	parts := make([]string, len(s.entries))
	for i, e := range s.entries {
		v := e.Value
		if e.source != "" {
			v = "<" + e.source + ">"
		}
		parts[i] = e.Key + "=" + v
	}
	return s.domain + " [" + strings.Join(parts, ", ") + "]"
}

func formatEntries(es []entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Key + "=" + e.Value
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// simulate sends sample requests through every rate limit filter's routes:
// each path a route matches, with every combination of the headers that the
// routes match on or read. It returns every descriptor sent, and an error
// for a route no sample reaches (its rate_limits would go unchecked) or a
// config it cannot simulate.
func simulate(b *bootstrapv3.Bootstrap) ([]sent, []error) {
	rls, errs := rateLimitFilters(b)
	var out []sent
	for _, rl := range rls {
		vhs := rl.hcm.GetRouteConfig().GetVirtualHosts()
		paths := map[string]bool{"/": true}
		names := map[string]bool{}
		for _, vh := range vhs {
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
			errs = append(errs, fmt.Errorf("listener %s: %d headers make too many combinations to simulate", rl.listener, len(headerNames)))
			continue
		}
		reached := map[string]bool{}
		for _, p := range slices.Sorted(maps.Keys(paths)) {
			for set := range 1 << len(headerNames) {
				req := request{path: p, headers: map[string]string{}}
				for i, n := range headerNames {
					if set&(1<<i) != 0 {
						req.headers[n] = sampleHeaderValue(n)
					}
				}
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

func sampleHeaderValue(name string) string {
	if v, ok := sampleHeaders[name]; ok {
		return v
	}
	return "sample-" + name
}

// sendFor returns the descriptors Envoy sends for req through the first
// rate limit filter of b.
func sendFor(b *bootstrapv3.Bootstrap, req request) ([]sent, error) {
	rls, errs := rateLimitFilters(b)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(rls) == 0 {
		return nil, errors.New("no rate limit filter")
	}
	_, ds, err := route(rls[0], req)
	return ds, err
}

// route finds the route Envoy picks for req (nil if none) and the
// descriptors the filter sends for it, in the order of its rate_limits.
func route(rl rateLimitFilter, req request) (*routev3.Route, []sent, error) {
	if len(rl.filter.GetRateLimits()) > 0 {
		return nil, nil, fmt.Errorf("listener %s: filter-level rate_limits are not simulated; put them on routes", rl.listener)
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
			var out []sent
			for i, lim := range r.GetRoute().GetRateLimits() {
				if lim.GetStage().GetValue() != rl.filter.GetStage() {
					continue
				}
				if lim.GetLimit() != nil {
					return nil, nil, fmt.Errorf("route %q: rate_limits[%d]: limit overrides are not simulated", r.GetName(), i)
				}
				es, ok, err := entries(lim.GetActions(), req)
				if err != nil {
					return nil, nil, fmt.Errorf("route %q: rate_limits[%d]: %w", r.GetName(), i, err)
				}
				if ok && len(es) > 0 {
					out = append(out, sent{req: req, route: r.GetName(), domain: rl.filter.GetDomain(), entries: es})
				}
			}
			return r, out, nil
		}
		return nil, nil, nil
	}
	return nil, nil, nil
}

func routeMatches(m *routev3.RouteMatch, req request) (bool, error) {
	if len(m.GetQueryParameters()) > 0 || m.GetRuntimeFraction() != nil || m.GetGrpc() != nil ||
		len(m.GetCookies()) > 0 || len(m.GetDynamicMetadata()) > 0 || len(m.GetFilterState()) > 0 || m.GetTlsContext() != nil {
		return false, errors.New("match conditions other than path and headers are not simulated")
	}
	path, fold := req.path, m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue()
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
	return headersMatch(m.GetHeaders(), req)
}

// headersMatch reports whether every matcher matches req.
func headersMatch(hms []*routev3.HeaderMatcher, req request) (bool, error) {
	for _, hm := range hms {
		v, present := req.header(hm.GetName())
		var m bool
		switch spec := hm.GetHeaderMatchSpecifier().(type) {
		case *routev3.HeaderMatcher_PresentMatch:
			m = present == spec.PresentMatch
		case *routev3.HeaderMatcher_StringMatch:
			s, want := v, spec.StringMatch
			if want.GetIgnoreCase() {
				s = strings.ToLower(s)
			}
			lower := func(x string) string {
				if want.GetIgnoreCase() {
					return strings.ToLower(x)
				}
				return x
			}
			switch p := want.GetMatchPattern().(type) {
			case *matcherv3.StringMatcher_Exact:
				m = present && s == lower(p.Exact)
			case *matcherv3.StringMatcher_Prefix:
				m = present && strings.HasPrefix(s, lower(p.Prefix))
			case *matcherv3.StringMatcher_Suffix:
				m = present && strings.HasSuffix(s, lower(p.Suffix))
			case *matcherv3.StringMatcher_Contains:
				m = present && strings.Contains(s, lower(p.Contains))
			default:
				return false, fmt.Errorf("header %s: string matcher %T is not simulated", hm.GetName(), p)
			}
		default:
			return false, fmt.Errorf("header %s: matcher %T is not simulated", hm.GetName(), spec)
		}
		if hm.GetInvertMatch() {
			m = !m
		}
		if !m {
			return false, nil
		}
	}
	return true, nil
}

// entries returns the entries one rate_limits element produces for req, in
// action order, and false when Envoy would send no descriptor for it (an
// action with nothing to add).
func entries(actions []*routev3.RateLimit_Action, req request) ([]entry, bool, error) {
	var out []entry
	for i, a := range actions {
		switch {
		case a.GetRequestHeaders() != nil:
			rh := a.GetRequestHeaders()
			v, ok := req.header(rh.GetHeaderName())
			if !ok {
				if rh.GetSkipIfAbsent() {
					continue
				}
				return nil, false, nil
			}
			out = append(out, entry{descriptors.Entry{Key: rh.GetDescriptorKey(), Value: v}, rh.GetHeaderName()})
		case a.GetRemoteAddress() != nil:
			out = append(out, entry{descriptors.Entry{Key: "remote_address", Value: clientAddress}, "client address"})
		case a.GetGenericKey() != nil:
			gk := a.GetGenericKey()
			key := cmp.Or(gk.GetDescriptorKey(), "generic_key") // Envoy's default key
			out = append(out, entry{descriptors.Entry{Key: key, Value: gk.GetDescriptorValue()}, ""})
		case a.GetHeaderValueMatch() != nil:
			hv := a.GetHeaderValueMatch()
			m, err := headersMatch(hv.GetHeaders(), req)
			if err != nil {
				return nil, false, fmt.Errorf("actions[%d]: %w", i, err)
			}
			expect := hv.GetExpectMatch() == nil || hv.GetExpectMatch().GetValue()
			if m != expect {
				if hv.GetDefaultValue() != "" {
					return nil, false, fmt.Errorf("actions[%d]: header_value_match default_value is not simulated", i)
				}
				return nil, false, nil
			}
			key := cmp.Or(hv.GetDescriptorKey(), "header_match") // Envoy's default key
			out = append(out, entry{descriptors.Entry{Key: key, Value: hv.GetDescriptorValue()}, ""})
		default:
			return nil, false, fmt.Errorf("actions[%d]: action %T is not simulated; teach entries() about it", i, a.GetActionSpecifier())
		}
	}
	return out, true, nil
}

// matchConfig reports every sent descriptor that cfg has no rule for under
// its domain, or whose rule neither limits it nor is unlimited (a node
// without rate_limit: Sluice would answer OK and count nothing, which in
// this demo means the action and the config disagree).
func matchConfig(cfg *descriptors.Config, all []sent) []error {
	var errs []error
	seen := map[string]bool{}
	for _, s := range all {
		ds := make([]descriptors.Entry, len(s.entries))
		for i, e := range s.entries {
			ds[i] = e.Entry
		}
		var msg string
		switch rule := cfg.Match(s.domain, ds); {
		case rule == nil:
			msg = fmt.Sprintf("domain %q: %s matches no rule in config/", s.domain, formatEntries(s.entries))
		case rule.Limit == nil && !rule.Unlimited:
			msg = fmt.Sprintf("domain %q: %s matches rule %s (%s:%d), which has no rate_limit", s.domain, formatEntries(s.entries), rule.FullKey, rule.File, rule.Line)
		default:
			continue
		}
		if !seen[msg] {
			seen[msg] = true
			errs = append(errs, fmt.Errorf("route %q, %s: %s", s.route, s.req, msg))
		}
	}
	return errs
}
