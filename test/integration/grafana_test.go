package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/sluicehq/sluice/internal/redistest"
)

// dashboard is the part of a Grafana dashboard JSON the test reads.
type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name, Type, Definition string
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		GridPos struct {
			X, W int
		} `json:"gridPos"`
		Datasource struct{ UID string } `json:"datasource"`
		Targets    []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// grafanaVars are Grafana's own variables: a range stands for them, so that
// the query parses as Prometheus will receive it.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// labelValues matches a variable query, label_values(SELECTOR, label).
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`)

// TestGrafanaDashboardNamesServedMetrics parses every query of
// deploy/grafana/sluice.json with the Prometheus parser and checks that each
// metric it names is in /metrics of the built binary after a run that
// exercises every outcome: admitted, near limit, over limit, shadow mode
// over limit, a refund and a release, a pool's class admitted and shed, the over-limit cache (Redis),
// failure-mode answers (a second instance whose Redis is down), config loads, quota streams, with
// envoyproxy/ratelimit's names on (--compat-metrics). A metric renamed in Go, or a
// typo in the dashboard, fails here instead of showing an empty panel.
func TestGrafanaDashboardNamesServedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/sluice.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("deploy/grafana/sluice.json: %v", err)
	}
	queries := dashboardQueries(t, &d)

	served := servedMetrics(t)
	p := parser.NewParser(parser.Options{})
	used := map[string]bool{}
	for _, q := range queries {
		expr, err := p.ParseExpr(grafanaVars.Replace(q))
		if err != nil {
			t.Errorf("query does not parse: %v\n  %s", err, q)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			name := vs.Name
			if name == "" {
				t.Errorf("query selects series without a metric name: %s", q)
				return nil
			}
			used[name] = true
			if !served[name] {
				t.Errorf("query names %s, which /metrics does not serve:\n  %s", name, q)
			}
			return nil
		})
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("%d queries name %d metrics: %s", len(queries), len(names), strings.Join(names, " "))
	// Every Sluice metric has a panel.
	for name := range served {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
		if strings.HasPrefix(name, "sluice_") && !used[name] && !used[base+"_bucket"] && !used[base+"_count"] {
			t.Errorf("/metrics serves %s, which no panel shows", name)
		}
	}
}

// dashboardQueries checks the dashboard's shape (unique panel ids, every
// panel on the Prometheus variable, inside the 24-column grid, with a
// query) and returns its PromQL: every target's expr and the selector of
// every label_values variable.
func dashboardQueries(t *testing.T, d *dashboard) []string {
	var queries []string
	if d.UID == "" {
		t.Error("dashboard has no uid")
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		queries = append(queries, m[1])
	}
	if !slices.Contains(vars, "datasource") {
		t.Error("dashboard has no datasource variable")
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: past the 24-column grid", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %q, %d targets", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, tg := range p.Targets {
			queries = append(queries, tg.Expr)
		}
	}
	return queries
}

// quotaReport sends one usage report on a quota stream of s and waits for
// its answer.
func quotaReport(t *testing.T, s *sluice) {
	t.Helper()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(s.Conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	err = stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"api_key": "grafana"}}, NumRequestsAllowed: 1}}})
	if err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		t.Fatalf("quota report: %v", err)
	}
}

// servedMetrics runs two instances of the built binary through every
// outcome and returns the metric names their /metrics serve (a histogram
// as NAME_bucket, NAME_sum and NAME_count, as PromQL sees it).
func servedMetrics(t *testing.T) map[string]bool {
	addr := redistest.Addr(t)
	ok := startSluice(t, "--config", "config", "--redis-url", "redis://"+addr+"/0", "--redis-prefix", redistest.Prefix(t.Name()),
		"--store-timeout", "500ms", "--compat-metrics")
	for range 25 { // per_client_address: 20 a minute; the last 4 admitted are near the limit
		ok.call(t, "edge", []string{"remote_address", "192.0.2.9"})
	}
	for range 8 { // beta_upload_trial: shadow mode, 5 a second
		ok.call(t, "edge", []string{"generic_key", "beta_upload"})
	}
	// pool_checkout_db: a class admitted, and one shed (a hit above the
	// test class's ceiling of 500).
	ok.call(t, "edge", []string{"pool", "checkout_db", "priority", "critical"})
	shed := request("edge", []string{"pool", "checkout_db", "priority", "test"})
	shed.HitsAddend = 600
	if _, err := ok.Client.ShouldRateLimit(context.Background(), shed); err != nil {
		t.Fatalf("ShouldRateLimit(pool, 600 hits): %v", err)
	}
	ok.Client.ShouldRateLimit(context.Background(), request("")) // INVALID_ARGUMENT
	// streams_per_api_key (concurrency): an acquire and its release; then a
	// refund of tokens_per_api_key.
	ok.call(t, "edge", []string{"streams", "grafana"})
	for _, kv := range [][]string{{"streams", "grafana"}, {"token_budget", "grafana"}} {
		req := request("edge", kv)
		req.Descriptors[0].IsNegativeHits = true
		if _, err := ok.Client.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatalf("ShouldRateLimit(%v, is_negative_hits): %v", kv, err)
		}
	}
	down := startSluice(t, "--config", "config", "--redis-url", "redis://127.0.0.1:1/0", "--failure-mode", "allow",
		"--ready-requires-store=false", "--compat-metrics")
	down.call(t, "edge", []string{"remote_address", "192.0.2.9"})
	quotaReport(t, ok)   // quota streams: reports and actions
	quotaReport(t, down) // the store is down: a failure-mode answer

	served := map[string]bool{}
	for _, s := range []*sluice{ok, down} {
		resp, err := http.Get("http://" + s.HTTPAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		tp := expfmt.NewTextParser(model.UTF8Validation)
		families, err := tp.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("parse /metrics: %v", err)
		}
		for name, f := range families {
			served[name] = true
			switch f.GetType().String() {
			case "HISTOGRAM":
				served[name+"_bucket"], served[name+"_sum"], served[name+"_count"] = true, true, true
			case "SUMMARY":
				served[name+"_sum"], served[name+"_count"] = true, true
			}
		}
	}
	return served
}
