package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/internal/source"
	"github.com/sluicehq/sluice/internal/testclock"
	"github.com/sluicehq/sluice/pkg/descriptors"
)

// TestJSONNamesStoreError: when Redis refuses the connection, the /json 503
// says so, not "context deadline exceeded" (go-redis's background dial
// retries used to outlast the call's 15 ms budget and hide the dial error).
func TestJSONNamesStoreError(t *testing.T) {
	srv, _, _ := startServer(t, "--redis-url", "redis://127.0.0.1:1/0", "--ready-requires-store=false")
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.1"}]}]}`
	for i := range 3 {
		resp, err := http.Post("http://"+srv.httpLn.Addr().String()+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(out), "connection refused") {
			t.Errorf("POST /json %d with Redis refusing: %d %q, want 503 naming \"connection refused\"", i, resp.StatusCode, out)
		}
	}
}

// TestTracing: with the peer's TRACING_* names set, every ShouldRateLimit is
// one server span that continues the trace context Envoy sent in the call's
// metadata (W3C traceparent or B3), carries the decision's attributes, and
// has one child span per store call; the resource and the sampler follow
// the settings.
func TestTracing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	env := map[string]string{"TRACING_ENABLED": "true", "TRACING_SERVICE_NAME": "edge-ratelimit",
		"TRACING_SERVICE_NAMESPACE": "gateway", "TRACING_SERVICE_INSTANCE_ID": "pod-7", "TRACING_SAMPLING_RATE": "0"}
	r := start(t, setup{env: env, hooks: hooks{exporter: exp}}, "--config", "../../config")
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-"+parentID+"-01")
	search := []string{"api_key", "traced", "route", "search"}
	if _, err := r.client.ShouldRateLimit(ctx, edgeRequest([]string{"api_key", "traced"}, search)); err != nil {
		t.Fatal(err)
	}
	// Sampling rate 0: a call without a sampled parent is not traced.
	if _, err := r.client.ShouldRateLimit(context.Background(), edgeRequest(search)); err != nil {
		t.Fatal(err)
	}
	// B3 multi-header context, as Envoy's Zipkin tracer sends it; the 11th
	// search is over its limit of 10.
	for range 9 {
		r.client.ShouldRateLimit(context.Background(), edgeRequest(search))
	}
	b3ctx := metadata.AppendToOutgoingContext(context.Background(), "x-b3-traceid", traceID, "x-b3-spanid", parentID, "x-b3-sampled", "1")
	if resp, err := r.client.ShouldRateLimit(b3ctx, edgeRequest(search)); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("11th search: %v %v, want OVER_LIMIT", resp, err)
	}

	servers, stores := waitSpans(t, exp, 2)
	for i, want := range []map[string]string{
		{"ratelimit.domain": "edge", "ratelimit.descriptors": "2", "ratelimit.overall_code": "OK", "ratelimit.limit_names": `["per_api_key","search_per_api_key"]`},
		{"ratelimit.domain": "edge", "ratelimit.descriptors": "1", "ratelimit.overall_code": "OVER_LIMIT", "ratelimit.limit_names": `["search_per_api_key"]`,
			"ratelimit.over_limit_names": `["search_per_api_key"]`},
	} {
		s := servers[i]
		if s.Parent.TraceID().String() != traceID || s.Parent.SpanID().String() != parentID || !s.Parent.IsRemote() {
			t.Errorf("server span %d: parent %v, want remote %s/%s from the call's metadata", i, s.Parent, traceID, parentID)
		}
		checkSpans(t, i, s, stores[i], traceID, want)
	}
}

// waitSpans waits for n server spans (each ends after its answer is sent)
// and returns the server and store spans; it fails unless there are
// exactly n of each.
func waitSpans(t *testing.T, exp *tracetest.InMemoryExporter, n int) (servers, stores tracetest.SpanStubs) {
	t.Helper()
	var spans tracetest.SpanStubs
	waitUntil(5*time.Second, 10*time.Millisecond, func() bool {
		spans, servers, stores = exp.GetSpans(), nil, nil
		for _, s := range spans {
			switch s.Name {
			case "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit":
				servers = append(servers, s)
			case "store.apply":
				stores = append(stores, s)
			}
		}
		return len(servers) >= n
	})
	if len(servers) != n || len(stores) != n {
		t.Fatalf("%d server and %d store spans, want %d and %d (unsampled calls make none): %v", len(servers), len(stores), n, n, spanNames(spans))
	}
	return servers, stores
}

// checkSpans checks server span i's attributes and resource, and that st
// is its child.
func checkSpans(t *testing.T, i int, s, st tracetest.SpanStub, traceID string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, kv := range s.Attributes {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("server span %d: %s = %q, want %q", i, k, got[k], v)
		}
	}
	if st.Parent.SpanID() != s.SpanContext.SpanID() || st.SpanContext.TraceID().String() != traceID {
		t.Errorf("store span %d: parent %v, want the server span %v", i, st.Parent.SpanID(), s.SpanContext.SpanID())
	}
	if h := attr(st, "ratelimit.hits"); h != want["ratelimit.descriptors"] {
		t.Errorf("store span %d: ratelimit.hits = %q, want %s", i, h, want["ratelimit.descriptors"])
	}
	res := map[string]string{}
	for _, kv := range s.Resource.Attributes() {
		res[string(kv.Key)] = kv.Value.Emit()
	}
	if res["service.name"] != "edge-ratelimit" || res["service.namespace"] != "gateway" || res["service.instance.id"] != "pod-7" {
		t.Errorf("resource %v, want the TRACING_SERVICE_* values", res)
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// TestConfigShowsRules: /config lists every domain's descriptor tree with
// the names, limits, windows and algorithms in force.
func TestConfigShowsRules(t *testing.T) {
	srv, _, _ := startServer(t)
	var out struct {
		Version       string       `json:"version"` // the binary's
		ConfigVersion string       `json:"config_version"`
		Rules         []configView `json:"rules"`
	}
	getJSON(t, "http://"+srv.httpLn.Addr().String()+"/config", &out)
	if len(out.ConfigVersion) != 12 || out.ConfigVersion != srv.core.Config().Version() || out.Version == "" {
		t.Errorf("/config config_version = %q, version %q; want the 12 hex digits of the config's Version and the binary's", out.ConfigVersion, out.Version)
	}
	// config/: algorithms.yaml and edge.yaml, by domain.
	if len(out.Rules) != 2 || out.Rules[0].Domain != "algorithms" || out.Rules[1].Domain != "edge" || out.Rules[1].File != "../../config/edge.yaml" {
		t.Fatalf("/config rules = %+v", out.Rules)
	}
	ds := out.Rules[1].Descriptors
	if len(ds) != 8 {
		t.Fatalf("%d top-level descriptors, want 8", len(ds))
	}
	if c := ds[7].Classes; c == nil || c.Key != "priority" || c.Lowest != "test" || len(c.Ceilings) != 4 ||
		c.Ceilings[1] != (ceilingView{Value: "default", Ceiling: "80%", Requests: 800}) {
		t.Errorf("the pool's classes = %+v", c)
	}
	if ds[4].Key != "token_budget" || ds[5].Limit == nil || ds[5].Limit.Algorithm != "concurrency" {
		t.Errorf("token_budget and streams = %+v / %+v", ds[4], ds[5])
	}
	l := ds[0].Descriptors[0].Limit
	if ds[0].Key != "api_key" || ds[0].Rule != "per_api_key" || ds[0].Limit.RequestsPerUnit != 100 ||
		l == nil || l.Name != "search_per_api_key" || l.Window != "1m0s" || l.Algorithm != "sliding_window" || l.Unit != "minute" {
		t.Errorf("api_key tree = %+v / %+v", ds[0], ds[0].Descriptors)
	}
	if !ds[1].Unlimited || ds[3].Value != "/v1/reports/*" || !ds[3].ShareThreshold || !ds[6].ShadowMode {
		t.Errorf("flags lost: %+v", ds)
	}
}

// TestStatusPageAPI: /ui/api shows a rule's decisions as they happen, its
// top values (with --ui-top-values), the store and the config in force;
// /ui serves the page from the binary, with a policy that forbids fetching
// anything elsewhere.
func TestStatusPageAPI(t *testing.T) {
	clk := testclock.New(time.Now())
	r := start(t, setup{hooks: hooks{now: clk.Now}}, "--config", "../../config", "--ui-top-values", "10", "--ui-sensitive", "edge/per_client_address")
	srv, client := r.srv, r.client
	base := "http://" + srv.httpLn.Addr().String()
	for range 25 {
		client.ShouldRateLimit(context.Background(), edgeRequest([]string{"remote_address", "198.51.100.7"}))
		client.ShouldRateLimit(context.Background(), edgeRequest([]string{"api_key", "ui-test"}))
	}
	var v apiView
	// The series hold complete seconds: end the calls' second.
	clk.Advance(time.Second)
	getJSON(t, base+"/ui/api", &v)
	if v.Store.Kind != "memory" || !v.Store.Healthy || v.Config.Source != "file: ../../config" || len(v.Config.Version) != 12 {
		t.Errorf("store %+v, config %+v", v.Store, v.Config)
	}
	if got := sum(v.Store.Calls); got != 50 {
		t.Errorf("store calls in the last minute = %d, want 50", got)
	}
	seen := map[string]bool{}
	for _, r := range v.Rules {
		seen[r.Rule] = true
		switch r.Rule {
		case "per_client_address":
			if sum(r.Decisions) != 25 || sum(r.Over) != 5 || !r.ValuesHidden || len(r.Top) != 0 || r.Limit != "20 / minute" {
				t.Errorf("per_client_address = %+v, want 25 decisions, 5 over, values hidden", r)
			}
		case "per_api_key":
			if sum(r.Decisions) != 25 || len(r.Top) != 1 || r.Top[0].Value != "api_key=ui-test" || r.Top[0].Hits != 25 {
				t.Errorf("per_api_key = %+v, want 25 decisions from api_key=ui-test", r)
			}
		}
	}
	if !seen["search_per_api_key"] || !seen["reports_shared"] || !seen["beta_upload_trial"] {
		t.Errorf("rules %v, want every limited rule of the config", seen)
	}
	checkAssets(t, base)
}

// TestStatusPageHidesValues: by default the status page and /ui/api show
// no descriptor value (they are often API keys: config/edge.yaml's are), only
// the counts; --ui-top-values shows them.
func TestStatusPageHidesValues(t *testing.T) {
	clk := testclock.New(time.Now())
	r := start(t, setup{hooks: hooks{now: clk.Now}}, "--config", "../../config")
	srv, client := r.srv, r.client
	base := "http://" + srv.httpLn.Addr().String()
	for range 5 {
		client.ShouldRateLimit(context.Background(), edgeRequest([]string{"api_key", "sk-live-secret"}))
	}
	clk.Advance(time.Second) // the series hold complete seconds
	resp, err := http.Get(base + "/ui/api")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "sk-live-secret") || !strings.Contains(string(body), `"top_values":0`) {
		t.Errorf("/ui/api by default shows the value or top_values is not 0:\n%s", body)
	}
}

// checkAssets checks that the page and its assets are served from the
// binary, under a policy that forbids fetching anything elsewhere, and name
// no external URL.
func checkAssets(t *testing.T, base string) {
	t.Helper()
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(body) < 500 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: %d, %d bytes, CSP %q", path, resp.StatusCode, len(body), resp.Header.Get("Content-Security-Policy"))
		}
		if b := strings.ReplaceAll(string(body), `"http://www.w3.org/2000/svg"`, ""); strings.Contains(b, "http://") || strings.Contains(b, "https://") {
			t.Errorf("%s names an external URL", path)
		}
	}
}

// apiView is the part of /ui/api the tests read.
type apiView struct {
	Store struct {
		Kind    string   `json:"kind"`
		Healthy bool     `json:"healthy"`
		Calls   []uint64 `json:"calls"`
	} `json:"store"`
	Config struct {
		Source, Version string
	} `json:"config"`
	Rules []struct {
		Rule         string   `json:"rule"`
		Limit        string   `json:"limit"`
		Decisions    []uint64 `json:"decisions"`
		Over         []uint64 `json:"over"`
		ValuesHidden bool     `json:"values_hidden"`
		Top          []struct {
			Value      string
			Hits, Over uint64
		} `json:"top"`
	} `json:"rules"`
}

func sum(xs []uint64) (n uint64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// TestStatusPageOff: --ui=false serves no page.
func TestStatusPageOff(t *testing.T) {
	srv, _, _ := startServer(t, "--ui=false")
	resp, err := http.Get("http://" + srv.httpLn.Addr().String() + "/ui/api")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/ui/api with --ui=false: %d, want 404", resp.StatusCode)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// xdsInfo is a config source that only describes itself, as the xDS source
// does, and delivers cfg as its first load.
type xdsInfo struct {
	info source.Info
	cfg  *descriptors.Config
}

func (x xdsInfo) Load(deliver source.Deliver) bool                { deliver(x.cfg, nil); return true }
func (x xdsInfo) Run(ctx context.Context, _ source.Deliver) error { <-ctx.Done(); return nil }
func (x xdsInfo) Info() source.Info                               { return x.info }

// configHolder is a source.Sink that only holds the config.
type configHolder struct{ cfg *descriptors.Config }

func (h *configHolder) SetConfig(c *descriptors.Config) { h.cfg = c }
func (h *configHolder) Config() *descriptors.Config     { return h.cfg }

// TestPageStatusOfXDS: the status page names an xDS source by its server
// and node id, says when it is disconnected, and shows the xDS version_info
// before the hash of the rules.
func TestPageStatusOfXDS(t *testing.T) {
	disconnected := false
	cfg, err := descriptors.Load("../../config")
	if err != nil {
		t.Fatal(err)
	}
	src := xdsInfo{source.Info{Kind: "xds", Server: "envoy-gateway:18001", NodeID: "envoy-ratelimit", Connected: &disconnected, Version: "v7"}, cfg}
	cs := source.NewState(prometheus.NewRegistry(), &configHolder{}, src, zap.NewNop())
	cs.Load()
	st := newConfigPage(cs, nil).pageStatus()
	if st.Source != "xds: envoy-gateway:18001 as node envoy-ratelimit (disconnected)" || st.Version != "v7 (rules "+cfg.Version()+")" {
		t.Errorf("page status = %+v", st)
	}
}

// TestSettingsInForceShown: a setting changed from its default (here by
// SLUICE_OVERDRAW and a flag) is in the start-up lines and in /config's
// settings, naming what set it; with none changed /config's list is empty.
func TestSettingsInForceShown(t *testing.T) {
	env := map[string]string{"SLUICE_OVERDRAW": "true"}
	r := start(t, setup{env: env}, "--config", "../../config", "--shadow-mode")
	var page struct {
		Settings []settings.InForce `json:"settings"`
	}
	getJSON(t, "http://"+r.srv.httpLn.Addr().String()+"/config", &page)
	got := map[string]string{}
	for _, in := range page.Settings {
		got[in.Name] = in.Value + " " + strings.Join(in.From, ",")
	}
	if got["overdraw"] != "true SLUICE_OVERDRAW" || got["shadow-mode"] != "true --shadow-mode" {
		t.Errorf("/config settings = %+v, want overdraw from SLUICE_OVERDRAW and shadow-mode from --shadow-mode", page.Settings)
	}

	core, logs := observer.New(zap.InfoLevel)
	logSettings(zap.New(core), r.srv.set, nil)
	lines := logs.FilterMessage("settings changed from the default").All()
	if len(lines) != 1 {
		t.Fatalf("start-up lines %v: want one naming the settings changed from the default", logs.All())
	}
	if s := fmt.Sprint(lines[0].ContextMap()["settings"]); !strings.Contains(s, "--overdraw=true (SLUICE_OVERDRAW)") || !strings.Contains(s, "--shadow-mode=true (--shadow-mode)") {
		t.Errorf("settings changed from the default: %s", s)
	}

	plain := launch(t, "--config", "../../config")
	getJSON(t, "http://"+plain.srv.httpLn.Addr().String()+"/config", &page)
	for _, in := range page.Settings {
		if in.Name != "grpc-addr" && in.Name != "http-addr" && in.Name != "debug-addr" && in.Name != "config" {
			t.Errorf("/config of a server with only its addresses and config given: %+v in force", in)
		}
	}
}
