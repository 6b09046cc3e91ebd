// Package istio_test checks examples/istio without a cluster: every
// EnvoyFilter patch value is converted into the go-control-plane message it
// stands for and validated (the messages inside every Any too), the patches
// are wired to the demo's Gateway, VirtualService and Sluice's Service, and
// every descriptor the route actions can send has a rule in the config that
// deploy/kubernetes puts in Sluice's ConfigMap.
package istio_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/envoysim"
	"github.com/sluicehq/sluice/pkg/descriptors"
)

const (
	kustomizeDir = "../../deploy/kubernetes"
	// clientAddress is the address simulated requests come from.
	clientAddress = "203.0.113.7"
	// gatewayLabel is the label of the Istio ingress gateway pods.
	gatewayLabel = "ingressgateway"
	// configName names the ConfigMap's config in the errors of
	// envoysim.MatchConfig.
	configName = "the ConfigMap's config"
)

// sampleHeaders are the values simulated requests carry for the headers
// the routes match on or read.
var sampleHeaders = map[string]string{"x-api-key": "alice", "x-internal-key": "billing"}

// newRequest returns a simulated request from clientAddress. It sets no
// Authority or Scheme: no VirtualService match or action here reads them.
func newRequest(path string, headers map[string]string) envoysim.Request {
	return envoysim.Request{Path: path, Headers: headers, ClientAddress: clientAddress}
}

func TestIstio(t *testing.T) {
	for _, err := range checkAll(t, ".", kustomizeDir) {
		t.Error(err)
	}
}

// TestIstioDescriptorShapes pins the descriptors the example sends: one for
// each rule in the edge config, the same list as examples/envoy/envoy.yaml.
func TestIstioDescriptorShapes(t *testing.T) {
	ex, errs := load(".")
	for _, err := range errs {
		t.Fatal(err)
	}
	sent, errs := simulate(ex)
	for _, err := range errs {
		t.Error(err)
	}
	want := []string{
		"edge [api_key=<x-api-key>]",
		"edge [api_key=<x-api-key>, route=search]",
		"edge [generic_key=beta_upload]",
		"edge [path=<:path>]",
		"edge [remote_address=<client address>]",
	}
	slices.Sort(want)
	shapes := map[string]bool{}
	for _, s := range sent {
		shapes[s.Shape()] = true
	}
	if got := slices.Sorted(maps.Keys(shapes)); !slices.Equal(got, want) {
		t.Errorf("descriptor shapes =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestIstioRequests pins the descriptors sent for the requests of
// examples/envoy's TestEnvoyYAMLRequests: the gateway and the compose demo
// limit the same request the same way.
func TestIstioRequests(t *testing.T) {
	ex, errs := load(".")
	for _, err := range errs {
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
		{"keyed search with a query", "/v1/search?q=x", map[string]string{"x-api-key": "alice"},
			[]string{"[api_key=alice]", "[api_key=alice, route=search]"}},
		{"not the search route", "/v1/searches", map[string]string{"x-api-key": "alice"},
			[]string{"[api_key=alice]"}},
		{"anonymous search", "/v1/search", nil, []string{"[" + ca + "]"}},
		// The gateway faces clients: a client's x-internal-key is no
		// bypass, the request is limited as any other.
		{"client-sent internal key", "/v1/search", map[string]string{"x-internal-key": "billing"},
			[]string{"[" + ca + "]"}},
		{"both keys", "/v1/items", map[string]string{"x-api-key": "alice", "x-internal-key": "billing"},
			[]string{"[api_key=alice]"}},
		{"keyed report", "/v1/reports/q3.csv", map[string]string{"x-api-key": "bob"},
			[]string{"[api_key=bob]", "[path=/v1/reports/q3.csv]"}},
		{"anonymous report", "/v1/reports/q3.csv", nil,
			[]string{"[" + ca + "]", "[path=/v1/reports/q3.csv]"}},
		{"keyed upload", "/v1/upload", map[string]string{"x-api-key": "bob"},
			[]string{"[api_key=bob]", "[generic_key=beta_upload]"}},
		{"not the upload route", "/v1/uploads", map[string]string{"x-api-key": "bob"},
			[]string{"[api_key=bob]"}},
		{"anonymous upload", "/v1/upload", nil, []string{"[" + ca + "]", "[generic_key=beta_upload]"}},
		{"anonymous anything", "/", nil, []string{"[" + ca + "]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent, err := sendFor(ex, newRequest(tc.path, tc.headers))
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

// TestIstioRejects proves the checks bite: each case breaks a copy of
// examples/istio (or of the ConfigMap's config) and the checks must say so.
func TestIstioRejects(t *testing.T) {
	for _, tc := range []struct {
		name     string
		file     string // in examples/istio, or "edge.yaml" for the ConfigMap's config
		old, new string
		want     string
	}{
		// Proto validation rules, inside the filter's typed_config and the actions.
		{"empty domain", "envoyfilter.yaml", "domain: edge", `domain: ""`, "RateLimit.Domain"},
		{"empty descriptor_key", "envoyfilter.yaml", "descriptor_key: api_key }", `descriptor_key: "" }`, "RequestHeaders.DescriptorKey"},
		{"empty regex", "envoyfilter.yaml", `regex: "^/v1/search([/?].*)?$"`, `regex: ""`, "RegexMatcher.Regex"},
		{"empty filter name", "envoyfilter.yaml", "name: envoy.filters.http.ratelimit", `name: ""`, "HttpFilter.Name"},
		// Parsing: a typo or an unknown type is an error, as in Envoy.
		{"unknown field", "envoyfilter.yaml", "failure_mode_deny:", "failure_mode_deni:", "unknown field"},
		{"unresolvable typed_config", "envoyfilter.yaml", "ratelimit.v3.RateLimit", "ratelimit.v3.RateLimitt", "unable to resolve"},
		{"unknown EnvoyFilter field", "envoyfilter.yaml", "workloadSelector:", "workloadSelecter:", "workloadSelecter"},
		{"route patch beyond rate_limits", "envoyfilter.yaml", "          route:\n            rate_limits:\n",
			"          route:\n            timeout: 1s\n            rate_limits:\n", "sets more than route.rate_limits"},
		// Wiring.
		{"cluster of another service", "envoyfilter.yaml", "cluster_name: outbound|8081||sluice.sluice.svc.cluster.local", "cluster_name: outbound|8080||sluice.sluice.svc.cluster.local", "outbound|8081||sluice.sluice.svc.cluster.local"},
		{"v2 transport", "envoyfilter.yaml", "transport_api_version: V3", "transport_api_version: AUTO", "transport_api_version"},
		{"filter after the router", "envoyfilter.yaml", "operation: INSERT_BEFORE", "operation: INSERT_AFTER", "INSERT_BEFORE"},
		{"patch for a route that does not exist", "envoyfilter.yaml", "name: edge-reports", "name: edge-report", `route "edge-report"`},
		{"route without rate limits", "demo.yaml", "- name: edge-default", "- name: edge-fallback", `route "edge-fallback" has no HTTP_ROUTE patch`},
		{"other gateway pods", "envoyfilter.yaml", "      istio: ingressgateway", "      istio: egressgateway", "workloadSelector"},
		// Descriptors with no rule in the ConfigMap's config.
		{"domain not in config", "envoyfilter.yaml", "domain: edge", "domain: edge-v2", `domain "edge-v2": [api_key=alice] matches no rule`},
		{"descriptor key not in config", "envoyfilter.yaml", "descriptor_key: api_key }", "descriptor_key: apikey }", "[apikey=alice] matches no rule"},
		{"descriptor value not in config", "envoyfilter.yaml", "descriptor_value: search", "descriptor_value: searching", "[api_key=alice, route=searching] matches no rule"},
		{"rule without a limit counts as unmatched", "edge.yaml", "    rate_limit:\n      name: per_client_address\n      unit: minute\n      requests_per_unit: 20\n", "",
			"[remote_address=" + clientAddress + "] matches rule"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, kdir := t.TempDir(), t.TempDir()
			copyFiles(t, ".", dir, ".yaml")
			copyFiles(t, kustomizeDir, kdir, ".yaml")
			if err := os.MkdirAll(filepath.Join(kdir, "config"), 0o755); err != nil {
				t.Fatal(err)
			}
			copyFiles(t, filepath.Join(kustomizeDir, "config"), filepath.Join(kdir, "config"), ".yaml")
			path := filepath.Join(dir, tc.file)
			if tc.file == "edge.yaml" {
				path = filepath.Join(kdir, "config", tc.file)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(tc.old)) {
				t.Fatalf("the test case no longer applies: %q not in %s", tc.old, tc.file)
			}
			if err := os.WriteFile(path, bytes.Replace(b, []byte(tc.old), []byte(tc.new), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			errs := checkAll(t, dir, kdir)
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("errors = %v, want one containing %q", errors.Join(errs...), tc.want)
		})
	}
}

func copyFiles(t *testing.T, src, dst, ext string) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(src, "*"+ext))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(n)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkAll runs every check on the example in dir against the Kubernetes
// manifests in kdir.
func checkAll(t *testing.T, dir, kdir string) []error {
	t.Helper()
	ex, errs := load(dir)
	if len(errs) > 0 {
		return errs
	}
	svc, err := sluiceService(kdir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configMapConfig(kdir)
	if err != nil {
		return []error{err}
	}
	errs = append(errs, checkPatches(ex, svc)...)
	errs = append(errs, checkWiring(ex)...)
	sent, simErrs := simulate(ex)
	errs = append(errs, simErrs...)
	return append(errs, envoysim.MatchConfig(cfg, sent, configName)...)
}

// Istio resources, the fields this example uses. They are decoded with
// unknown fields rejected, so a misspelt field fails here as it would be
// rejected by Istio's CRD schema.
type (
	metadata struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	}
	envoyFilter struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Metadata   metadata `yaml:"metadata"`
		Spec       struct {
			WorkloadSelector struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"workloadSelector"`
			ConfigPatches []configPatch `yaml:"configPatches"`
		} `yaml:"spec"`
	}
	configPatch struct {
		ApplyTo string `yaml:"applyTo"`
		Match   struct {
			Context  string `yaml:"context"`
			Listener *struct {
				FilterChain struct {
					Filter struct {
						Name      string `yaml:"name"`
						SubFilter struct {
							Name string `yaml:"name"`
						} `yaml:"subFilter"`
					} `yaml:"filter"`
				} `yaml:"filterChain"`
			} `yaml:"listener"`
			RouteConfiguration *struct {
				Vhost struct {
					Name  string `yaml:"name"`
					Route struct {
						Name   string `yaml:"name"`
						Action string `yaml:"action"`
					} `yaml:"route"`
				} `yaml:"vhost"`
			} `yaml:"routeConfiguration"`
			Cluster *struct {
				Service    string `yaml:"service"`
				PortNumber int    `yaml:"portNumber"`
			} `yaml:"cluster"`
		} `yaml:"match"`
		Patch struct {
			Operation string `yaml:"operation"`
			Value     any    `yaml:"value"`
		} `yaml:"patch"`
	}
	gateway struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Metadata   metadata `yaml:"metadata"`
		Spec       struct {
			Selector map[string]string `yaml:"selector"`
			Servers  []struct {
				Port struct {
					Number   int    `yaml:"number"`
					Name     string `yaml:"name"`
					Protocol string `yaml:"protocol"`
				} `yaml:"port"`
				Hosts []string `yaml:"hosts"`
			} `yaml:"servers"`
		} `yaml:"spec"`
	}
	virtualService struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Metadata   metadata `yaml:"metadata"`
		Spec       struct {
			Hosts    []string    `yaml:"hosts"`
			Gateways []string    `yaml:"gateways"`
			HTTP     []httpRoute `yaml:"http"`
		} `yaml:"spec"`
	}
	httpRoute struct {
		Name  string `yaml:"name"`
		Match []struct {
			URI *struct {
				Prefix string `yaml:"prefix"`
			} `yaml:"uri"`
			Headers        map[string]stringMatch `yaml:"headers"`
			WithoutHeaders map[string]stringMatch `yaml:"withoutHeaders"`
		} `yaml:"match"`
		Route []struct {
			Destination struct {
				Host string `yaml:"host"`
				Port struct {
					Number int `yaml:"number"`
				} `yaml:"port"`
			} `yaml:"destination"`
		} `yaml:"route"`
	}
	// stringMatch is Istio's StringMatch; only {} (any value: the header is
	// present) is simulated.
	stringMatch struct {
		Exact  *string `yaml:"exact"`
		Prefix *string `yaml:"prefix"`
		Regex  *string `yaml:"regex"`
	}
)

// example is everything in examples/istio.
type example struct {
	filters  []envoyFilter
	gateways []gateway
	vss      []virtualService
}

// load reads every YAML document in dir's .yaml files, decoding the Istio
// kinds strictly and ignoring plain Kubernetes ones.
func load(dir string) (*example, []error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, []error{err}
	}
	ex := &example{}
	var errs []error
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				errs = append(errs, fmt.Errorf("%s#%d: %w", filepath.Base(name), i, err))
				break
			}
			var head struct {
				Kind string `yaml:"kind"`
			}
			if err := n.Decode(&head); err != nil {
				errs = append(errs, fmt.Errorf("%s#%d: %w", filepath.Base(name), i, err))
				continue
			}
			var target any
			switch head.Kind {
			case "EnvoyFilter":
				ex.filters = append(ex.filters, envoyFilter{})
				target = &ex.filters[len(ex.filters)-1]
			case "Gateway":
				ex.gateways = append(ex.gateways, gateway{})
				target = &ex.gateways[len(ex.gateways)-1]
			case "VirtualService":
				ex.vss = append(ex.vss, virtualService{})
				target = &ex.vss[len(ex.vss)-1]
			default:
				continue
			}
			if err := decodeStrict(&n, target); err != nil {
				errs = append(errs, fmt.Errorf("%s#%d: %s: %w", filepath.Base(name), i, head.Kind, err))
			}
		}
	}
	return ex, errs
}

// decodeStrict decodes n into v, rejecting fields v does not have.
func decodeStrict(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// service is what examples/istio needs to know about Sluice's Service.
type service struct {
	name, namespace string
	grpcPort        int
	appProtocol     string
}

// clusterName is the name Istio gives the outbound cluster of the port.
func (s service) clusterName() string {
	return fmt.Sprintf("outbound|%d||%s.%s.svc.cluster.local", s.grpcPort, s.name, s.namespace)
}

// sluiceService reads Sluice's Service from deploy/kubernetes/service.yaml.
func sluiceService(kdir string) (service, error) {
	b, err := os.ReadFile(filepath.Join(kdir, "service.yaml"))
	if err != nil {
		return service{}, err
	}
	var s struct {
		Metadata metadata `yaml:"metadata"`
		Spec     struct {
			Ports []struct {
				Name        string `yaml:"name"`
				Port        int    `yaml:"port"`
				AppProtocol string `yaml:"appProtocol"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &s); err != nil {
		return service{}, fmt.Errorf("service.yaml: %w", err)
	}
	out := service{name: s.Metadata.Name, namespace: s.Metadata.Namespace}
	for _, p := range s.Spec.Ports {
		if p.Name == "grpc" {
			out.grpcPort, out.appProtocol = p.Port, p.AppProtocol
		}
	}
	if out.grpcPort == 0 {
		return service{}, errors.New("service.yaml: no port named grpc")
	}
	return out, nil
}

// configMapConfig loads the config deploy/kubernetes puts in Sluice's
// ConfigMap: the files of its configMapGenerator, with Sluice's loader.
func configMapConfig(kdir string) (*descriptors.Config, error) {
	b, err := os.ReadFile(filepath.Join(kdir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		ConfigMapGenerator []struct {
			Name  string   `yaml:"name"`
			Files []string `yaml:"files"`
		} `yaml:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("kustomization.yaml: %w", err)
	}
	var srcs []descriptors.Source
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			_, path, ok := strings.Cut(f, "=")
			if !ok {
				path = f
			}
			data, err := os.ReadFile(filepath.Join(kdir, path))
			if err != nil {
				return nil, err
			}
			srcs = append(srcs, descriptors.Source{Name: path, Data: data})
		}
	}
	if len(srcs) == 0 {
		return nil, errors.New("kustomization.yaml: no configMapGenerator files")
	}
	return descriptors.Parse(srcs...)
}

// toProto converts a patch value to m the way Istio does: YAML to JSON,
// then the proto JSON mapping, which rejects unknown fields and any "@type"
// that is not linked in.
func toProto(value any, m proto.Message) error {
	js, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("convert YAML to JSON: %w", err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		return fmt.Errorf("convert to %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// validateRateLimits validates each rate_limits entry on its own: a MERGE
// value is a fragment (a Route without match or cluster, a VirtualHost
// without name or domains), so ValidateAll on the whole would report the
// fields the patch leaves to Istio.
func validateRateLimits(rls []*routev3.RateLimit, path string) []error {
	var errs []error
	if len(rls) == 0 {
		errs = append(errs, fmt.Errorf("%s: no rate_limits", path))
	}
	for i, rl := range rls {
		errs = append(errs, envoysim.ValidateDeep(rl, fmt.Sprintf("%s.rate_limits[%d]", path, i))...)
	}
	return errs
}

// checkPatches converts every patch value into its go-control-plane message
// and validates it, and checks the rate limit filter's settings.
func checkPatches(ex *example, svc service) []error {
	var errs []error
	filters := 0
	for _, ef := range ex.filters {
		for i, p := range ef.Spec.ConfigPatches {
			where := fmt.Sprintf("EnvoyFilter %s: configPatches[%d] (%s)", ef.Metadata.Name, i, p.ApplyTo)
			switch p.ApplyTo {
			case "HTTP_FILTER":
				hf := &hcmv3.HttpFilter{}
				if err := toProto(p.Patch.Value, hf); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
					continue
				}
				errs = append(errs, envoysim.ValidateDeep(hf, where)...)
				rl := &ratelimitv3.RateLimit{}
				if !hf.GetTypedConfig().MessageIs(rl) {
					errs = append(errs, fmt.Errorf("%s: typed_config is %s, want %s", where, hf.GetTypedConfig().GetTypeUrl(), rl.ProtoReflect().Descriptor().FullName()))
					continue
				}
				if err := hf.GetTypedConfig().UnmarshalTo(rl); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
					continue
				}
				filters++
				errs = append(errs, checkFilter(where, p, rl, svc)...)
			case "HTTP_ROUTE":
				r := &routev3.Route{}
				if err := toProto(p.Patch.Value, r); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
					continue
				}
				errs = append(errs, envoysim.ValidateAnys(r, where)...)
				errs = append(errs, validateRateLimits(r.GetRoute().GetRateLimits(), where+": route")...)
				rest := proto.CloneOf(r)
				rest.GetRoute().RateLimits = nil
				if !proto.Equal(rest, &routev3.Route{Action: &routev3.Route_Route{Route: &routev3.RouteAction{}}}) {
					errs = append(errs, fmt.Errorf("%s: the patch sets more than route.rate_limits: %v", where, rest))
				}
				if p.Patch.Operation != "MERGE" {
					errs = append(errs, fmt.Errorf("%s: operation %s, want MERGE (the route comes from the VirtualService)", where, p.Patch.Operation))
				}
				if p.Match.RouteConfiguration == nil || p.Match.RouteConfiguration.Vhost.Route.Name == "" {
					errs = append(errs, fmt.Errorf("%s: match.routeConfiguration.vhost.route.name is empty: the patch would apply to every route", where))
				}
			case "VIRTUAL_HOST":
				vh := &routev3.VirtualHost{}
				if err := toProto(p.Patch.Value, vh); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
					continue
				}
				errs = append(errs, envoysim.ValidateAnys(vh, where)...)
				errs = append(errs, validateRateLimits(vh.GetRateLimits(), where)...)
			case "CLUSTER":
				c := &clusterv3.Cluster{}
				if err := toProto(p.Patch.Value, c); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
					continue
				}
				errs = append(errs, envoysim.ValidateDeep(c, where)...)
			default:
				errs = append(errs, fmt.Errorf("%s: applyTo %s is not checked; teach checkPatches about it", where, p.ApplyTo))
			}
			if p.Match.Context != "GATEWAY" {
				errs = append(errs, fmt.Errorf("%s: match.context %q, want GATEWAY", where, p.Match.Context))
			}
		}
	}
	if filters != 1 {
		errs = append(errs, fmt.Errorf("%d envoy.filters.http.ratelimit HTTP_FILTER patches, want 1", filters))
	}
	return errs
}

// checkFilter checks the rate limit filter against Sluice's Service and
// where Istio puts it.
func checkFilter(where string, p configPatch, rl *ratelimitv3.RateLimit, svc service) []error {
	var errs []error
	if p.Patch.Operation != "INSERT_BEFORE" || p.Match.Listener == nil ||
		p.Match.Listener.FilterChain.Filter.Name != "envoy.filters.network.http_connection_manager" ||
		p.Match.Listener.FilterChain.Filter.SubFilter.Name != "envoy.filters.http.router" {
		errs = append(errs, fmt.Errorf("%s: must be INSERT_BEFORE the subFilter envoy.filters.http.router of envoy.filters.network.http_connection_manager: the router sends the request upstream", where))
	}
	srv := rl.GetRateLimitService()
	if v := srv.GetTransportApiVersion(); v != corev3.ApiVersion_V3 {
		errs = append(errs, fmt.Errorf("%s: rate_limit_service.transport_api_version = %v, want V3", where, v))
	}
	if got, want := srv.GetGrpcService().GetEnvoyGrpc().GetClusterName(), svc.clusterName(); got != want {
		errs = append(errs, fmt.Errorf("%s: rate_limit_service cluster %q, want %q (Service %s in deploy/kubernetes, port grpc)", where, got, want, svc.name))
	}
	if svc.appProtocol != "grpc" {
		errs = append(errs, fmt.Errorf("deploy/kubernetes Service %s: port grpc needs appProtocol: grpc, or Istio's cluster for it speaks HTTP/1.1", svc.name))
	}
	if d := rl.GetTimeout().AsDuration(); rl.GetTimeout() == nil || d <= 0 {
		errs = append(errs, fmt.Errorf("%s: set timeout explicitly", where))
	}
	if m, ok := p.Patch.Value.(map[string]any); ok {
		tc, _ := m["typed_config"].(map[string]any)
		if _, ok := tc["failure_mode_deny"]; !ok {
			errs = append(errs, fmt.Errorf("%s: set failure_mode_deny explicitly, so readers see the choice", where))
		}
	}
	return errs
}

// checkWiring checks that the EnvoyFilters, the Gateway and the
// VirtualService name the same gateway pods and routes.
func checkWiring(ex *example) []error {
	var errs []error
	for _, ef := range ex.filters {
		if ef.APIVersion != "networking.istio.io/v1alpha3" {
			errs = append(errs, fmt.Errorf("EnvoyFilter %s: apiVersion %s, want networking.istio.io/v1alpha3", ef.Metadata.Name, ef.APIVersion))
		}
		if got := ef.Spec.WorkloadSelector.Labels["istio"]; got != gatewayLabel {
			errs = append(errs, fmt.Errorf("EnvoyFilter %s: workloadSelector istio=%q, want %q: only the ingress gateway", ef.Metadata.Name, got, gatewayLabel))
		}
		if ef.Metadata.Namespace != "istio-system" {
			errs = append(errs, fmt.Errorf("EnvoyFilter %s: namespace %q, want istio-system, where the gateway runs", ef.Metadata.Name, ef.Metadata.Namespace))
		}
	}
	gws := map[string]bool{}
	for _, g := range ex.gateways {
		if g.Spec.Selector["istio"] != gatewayLabel {
			errs = append(errs, fmt.Errorf("Gateway %s: selector istio=%q, want %q", g.Metadata.Name, g.Spec.Selector["istio"], gatewayLabel))
		}
		gws[g.Metadata.Namespace+"/"+g.Metadata.Name] = true
	}
	patched := map[string]bool{}
	for _, ef := range ex.filters {
		for _, p := range ef.Spec.ConfigPatches {
			if p.ApplyTo == "HTTP_ROUTE" && p.Match.RouteConfiguration != nil {
				patched[p.Match.RouteConfiguration.Vhost.Route.Name] = true
			}
		}
	}
	routes := map[string]bool{}
	for _, vs := range ex.vss {
		for _, g := range vs.Spec.Gateways {
			if !strings.Contains(g, "/") {
				g = vs.Metadata.Namespace + "/" + g
			}
			if !gws[g] {
				errs = append(errs, fmt.Errorf("VirtualService %s: gateway %s is not defined here", vs.Metadata.Name, g))
			}
		}
		for _, r := range vs.Spec.HTTP {
			if routes[r.Name] {
				errs = append(errs, fmt.Errorf("VirtualService %s: route name %q is used twice; EnvoyFilters find routes by name", vs.Metadata.Name, r.Name))
			}
			routes[r.Name] = true
			if !patched[r.Name] {
				errs = append(errs, fmt.Errorf("VirtualService %s: route %q has no HTTP_ROUTE patch: requests on it would not be rate limited", vs.Metadata.Name, r.Name))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(patched)) {
		if !routes[name] {
			errs = append(errs, fmt.Errorf("HTTP_ROUTE patch for route %q: no VirtualService route has that name", name))
		}
	}
	return errs
}

// gatewayConfig is the gateway's view: the filter's domain, and the rate
// limits of each route by name.
type gatewayConfig struct {
	domain string
	limits map[string][]*routev3.RateLimit
}

func parseGateway(ex *example) (*gatewayConfig, error) {
	g := &gatewayConfig{limits: map[string][]*routev3.RateLimit{}}
	for _, ef := range ex.filters {
		for _, p := range ef.Spec.ConfigPatches {
			switch p.ApplyTo {
			case "HTTP_FILTER":
				hf, rl := &hcmv3.HttpFilter{}, &ratelimitv3.RateLimit{}
				if err := toProto(p.Patch.Value, hf); err != nil {
					return nil, err
				}
				if err := hf.GetTypedConfig().UnmarshalTo(rl); err != nil {
					return nil, err
				}
				if len(rl.GetRateLimits()) > 0 {
					return nil, errors.New("filter-level rate_limits are not simulated")
				}
				g.domain = rl.GetDomain()
			case "HTTP_ROUTE":
				r := &routev3.Route{}
				if err := toProto(p.Patch.Value, r); err != nil {
					return nil, err
				}
				if p.Match.RouteConfiguration == nil {
					continue
				}
				name := p.Match.RouteConfiguration.Vhost.Route.Name
				g.limits[name] = append(g.limits[name], r.GetRoute().GetRateLimits()...)
			case "VIRTUAL_HOST":
				return nil, errors.New("VIRTUAL_HOST rate_limits are not simulated; teach route() about them")
			}
		}
	}
	return g, nil
}

// simulate sends sample requests through the VirtualService routes: the
// paths the routes and actions name, each with every combination of the
// headers they match on or read. It returns every descriptor sent, and an
// error for a route no sample reaches.
func simulate(ex *example) ([]envoysim.Descriptor, []error) {
	g, err := parseGateway(ex)
	if err != nil {
		return nil, []error{err}
	}
	paths := map[string]bool{"/": true, "/v1/items": true}
	names := map[string]bool{}
	for _, vs := range ex.vss {
		for _, r := range vs.Spec.HTTP {
			for _, m := range r.Match {
				if m.URI != nil {
					paths[m.URI.Prefix] = true
					paths[strings.TrimSuffix(m.URI.Prefix, "/")+"/sample"] = true
				}
				for n := range m.Headers {
					names[n] = true
				}
				for n := range m.WithoutHeaders {
					names[n] = true
				}
			}
		}
	}
	for _, rls := range g.limits {
		for _, rl := range rls {
			for _, a := range rl.GetActions() {
				if n := a.GetRequestHeaders().GetHeaderName(); n != "" && !strings.HasPrefix(n, ":") {
					names[strings.ToLower(n)] = true
				}
				for _, h := range a.GetHeaderValueMatch().GetHeaders() {
					if re := h.GetStringMatch().GetSafeRegex().GetRegex(); h.GetName() == ":path" && re != "" {
						// A path the regex accepts, and its neighbours.
						p := strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(re, "(", 2)[0], "^"), "$")
						paths[p], paths[p+"/sample"], paths[p+"?q=1"], paths[p+"x"] = true, true, true, true
					}
				}
			}
		}
	}
	headerNames := slices.Sorted(maps.Keys(names))
	var out []envoysim.Descriptor
	var errs []error
	reached := map[string]bool{}
	for _, req := range envoysim.SampleRequests(newRequest("", nil), slices.Sorted(maps.Keys(paths)), headerNames, sampleHeaders) {
		name, ds, err := route(ex, g, req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		reached[name] = true
		out = append(out, ds...)
	}
	for _, vs := range ex.vss {
		for _, r := range vs.Spec.HTTP {
			if !reached[r.Name] {
				errs = append(errs, fmt.Errorf("route %q: no sample request reaches it, so its rate_limits are unchecked", r.Name))
			}
		}
	}
	return out, errs
}

// sendFor returns the descriptors the gateway sends for req.
func sendFor(ex *example, req envoysim.Request) ([]envoysim.Descriptor, error) {
	g, err := parseGateway(ex)
	if err != nil {
		return nil, err
	}
	_, ds, err := route(ex, g, req)
	return ds, err
}

// route finds the VirtualService route Istio picks for req ("" if none)
// and the descriptors the filter sends for it.
func route(ex *example, g *gatewayConfig, req envoysim.Request) (string, []envoysim.Descriptor, error) {
	for _, vs := range ex.vss {
		for _, r := range vs.Spec.HTTP {
			ok, err := vsMatches(r, req)
			if err != nil {
				return "", nil, fmt.Errorf("route %q: %w", r.Name, err)
			}
			if !ok {
				continue
			}
			var out []envoysim.Descriptor
			for i, lim := range g.limits[r.Name] {
				if lim.GetStage().GetValue() != 0 || lim.GetLimit() != nil {
					return "", nil, fmt.Errorf("route %q: rate_limits[%d]: stage and limit are not simulated", r.Name, i)
				}
				es, ok, err := envoysim.Entries(lim.GetActions(), req)
				if err != nil {
					return "", nil, fmt.Errorf("route %q: rate_limits[%d]: %w", r.Name, i, err)
				}
				if ok && len(es) > 0 {
					out = append(out, envoysim.Descriptor{Req: req, Route: r.Name, Domain: g.domain, Entries: es})
				}
			}
			return r.Name, out, nil
		}
	}
	return "", nil, nil
}

// vsMatches reports whether an Istio HTTP route matches req: any of its
// match blocks (none matches everything), each an AND of its conditions.
func vsMatches(r httpRoute, req envoysim.Request) (bool, error) {
	if len(r.Match) == 0 {
		return true, nil
	}
	for _, m := range r.Match {
		ok := m.URI == nil || strings.HasPrefix(req.Path, m.URI.Prefix)
		for name, sm := range m.Headers {
			if sm.Exact != nil || sm.Prefix != nil || sm.Regex != nil {
				return false, fmt.Errorf("header %s: only {} (present) is simulated", name)
			}
			_, present := req.Header(name)
			ok = ok && present
		}
		for name, sm := range m.WithoutHeaders {
			if sm.Exact != nil || sm.Prefix != nil || sm.Regex != nil {
				return false, fmt.Errorf("withoutHeaders %s: only {} (present) is simulated", name)
			}
			_, present := req.Header(name)
			ok = ok && !present
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}
