package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// The chart test renders deploy/helm/sluice with Helm's own Go packages
// (tools/cmd/helm-render, in the tools module, so Helm is no dependency of
// the binary's module), values checked against values.schema.json and the
// chart linted as helm lint --strict does, and checks every rendered
// manifest as the kustomize ones are checked: decoded strictly into the
// Kubernetes API types, pod security, selectors, and the Sluice container
// against the binary's settings, routes and config loader.

const (
	chartDir    = "helm/sluice"
	chartConfig = "helm/sluice/files/config/edge.yaml"
	// The release the checks expect: its objects are named sluice.
	releaseName = "sluice"
	releaseNS   = "sluice"
)

// render renders the chart with values (YAML text, one per -f) as release
// name in namespace ns, returning the manifests or helm-render's error.
func render(t *testing.T, name, ns string, values ...string) ([]byte, error) {
	t.Helper()
	tools, _ := filepath.Abs("../tools")
	chart, _ := filepath.Abs(chartDir)
	args := []string{"run", "./cmd/helm-render", "-chart", chart, "-name", name, "-namespace", ns, "-lint"}
	for i, v := range values {
		p := filepath.Join(t.TempDir(), fmt.Sprintf("values%d.yaml", i))
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = tools
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("go run ./cmd/helm-render: %v", err)
		}
		return nil, errors.New(strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// chartCase is one set of values and what its render must contain.
type chartCase struct {
	name   string
	values string
	kinds  []string // "Kind name" of every object, sorted
}

// envoyPeers is the networkPolicy.envoy of every case: the Istio ingress
// gateway's pods.
const envoyPeers = `networkPolicy:
  envoy:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: istio-system}}
      podSelector: {matchLabels: {istio: ingressgateway}}
`

var chartCases = []chartCase{
	{"defaults with a Redis URL", "redis:\n  url: redis://redis.cache.svc.cluster.local:6379/0\n" + envoyPeers,
		[]string{"ConfigMap sluice-config", "Deployment sluice", "NetworkPolicy sluice", "PodDisruptionBudget sluice", "Service sluice", "ServiceAccount sluice"}},
	{"no NetworkPolicy", "redis:\n  url: redis://redis.cache.svc.cluster.local:6379/0\nnetworkPolicy:\n  enabled: false\n",
		[]string{"ConfigMap sluice-config", "Deployment sluice", "PodDisruptionBudget sluice", "Service sluice", "ServiceAccount sluice"}},
	{"Redis URL from a Secret, HPA, ServiceMonitor, own config", envoyPeers + `redis:
  existingSecret: sluice-redis
image:
  repository: registry.example.com/sluice
autoscaling:
  enabled: true
  minReplicas: 3
serviceMonitor:
  enabled: true
  labels: {release: prometheus}
env:
  SLUICE_FAILURE_MODE: allow
config:
  files:
    edge.yaml: |
      domain: edge
      descriptors:
        - key: remote_address
          rate_limit: {unit: second, requests_per_unit: 10}
`, []string{"ConfigMap sluice-config", "Deployment sluice", "HorizontalPodAutoscaler sluice", "NetworkPolicy sluice", "PodDisruptionBudget sluice",
		"Service sluice", "ServiceAccount sluice", "ServiceMonitor sluice"}},
}

// TestHelmChart renders each case and runs every check on it.
func TestHelmChart(t *testing.T) {
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, releaseName, releaseNS, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			m, errs := loadRendered(out)
			var got []string
			for _, o := range m.objects {
				got = append(got, o.kind+" "+o.name)
			}
			if slices.Sort(got); !slices.Equal(got, tc.kinds) {
				t.Errorf("rendered %q, want %q", got, tc.kinds)
			}
			t.Logf("rendered: %s", strings.Join(got, ", "))
			for _, err := range append(errs, checkChart(m, sluiceSrc)...) {
				t.Error(err)
			}
		})
	}
}

// loadRendered decodes helm-render's output, strictly.
func loadRendered(out []byte) (*manifests, []error) {
	m := newManifests(nil)
	var errs []error
	for i, doc := range bytes.Split(out, []byte("\n---\n")) {
		where := fmt.Sprintf("document %d", i)
		if _, rest, ok := bytes.Cut(doc, []byte("# Source: ")); ok {
			where, _, _ = strings.Cut(string(rest), "\n")
		}
		errs = append(errs, m.decode(where, doc)...)
	}
	m.index()
	return m, errs
}

// checkChart runs the kustomize checks that apply to a chart (all but the
// kustomization's own and the bundled Redis) and the chart's own.
func checkChart(m *manifests, srcDir string) []error {
	sl, err := readSluice(srcDir)
	if err != nil {
		return []error{err}
	}
	errs := checkChartInventory(m)
	for _, name := range slices.Sorted(maps.Keys(m.deployments)) {
		errs = append(errs, checkPodSecurity(name, m.deployments[name])...)
	}
	errs = append(errs, checkSelectors(m)...)
	d := m.deployments[sluiceName]
	if d == nil {
		return append(errs, fmt.Errorf("no Deployment %s", sluiceName))
	}
	if h := m.hpas[sluiceName]; h != nil {
		errs = append(errs, checkHPA(h, d)...)
		if d.Spec.Replicas == nil && h.Spec.MinReplicas != nil {
			r := *h.Spec.MinReplicas // the HPA's floor is the replicas checkSluice weighs
			d = d.DeepCopy()
			d.Spec.Replicas = &r
		}
	}
	errs = append(errs, checkSluice(m, d, sl)...)
	errs = append(errs, checkRedisSecret(d)...)
	if len(m.netpols) > 0 { // the chart's is optional (networkPolicy.enabled)
		errs = append(errs, checkNetworkPolicies(m)...)
	}
	for _, name := range slices.Sorted(maps.Keys(m.monitors)) {
		errs = append(errs, checkMonitor(m, m.monitors[name], sl)...)
	}
	return errs
}

// checkChartInventory checks each object once, in the release's namespace,
// with the part-of label.
func checkChartInventory(m *manifests) []error {
	var errs []error
	seen := map[string]string{}
	for _, o := range m.objects {
		id := o.kind + " " + o.name
		if prev, ok := seen[id]; ok {
			errs = append(errs, fmt.Errorf("%s: %s is also rendered by %s", o.where, id, prev))
		}
		seen[id] = o.where
		if o.namespace != releaseNS {
			errs = append(errs, fmt.Errorf("%s: %s has namespace %q, want the release's %q", o.where, id, o.namespace, releaseNS))
		}
		if l := labelsOf(o.value); l["app.kubernetes.io/part-of"] != "sluice" {
			errs = append(errs, fmt.Errorf("%s: %s: label app.kubernetes.io/part-of = %q, want sluice", o.where, id, l["app.kubernetes.io/part-of"]))
		}
	}
	return errs
}

// checkHPA checks that the HPA scales the Sluice Deployment, never below
// two pods, and that the Deployment leaves the count to it.
func checkHPA(h *autoscalingv2.HorizontalPodAutoscaler, d *appsv1.Deployment) []error {
	var errs []error
	if r := h.Spec.ScaleTargetRef; r.Kind != "Deployment" || r.Name != d.Name || r.APIVersion != "apps/v1" {
		errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %s: scales %s %s %s, want apps/v1 Deployment %s", h.Name, r.APIVersion, r.Kind, r.Name, d.Name))
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
		errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %s: minReplicas %v maxReplicas %d, want 2 <= min <= max", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas))
	}
	if d.Spec.Replicas != nil {
		errs = append(errs, fmt.Errorf("Deployment %s: sets replicas beside an HPA: each upgrade would reset the HPA's count", d.Name))
	}
	return errs
}

// checkRedisSecret checks that a SLUICE_REDIS_URL from a Secret names one.
func checkRedisSecret(d *appsv1.Deployment) []error {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == "SLUICE_REDIS_URL" && e.ValueFrom != nil {
				if r := e.ValueFrom.SecretKeyRef; r == nil || r.Name == "" || r.Key == "" {
					return []error{fmt.Errorf("Deployment %s: SLUICE_REDIS_URL valueFrom must be a secretKeyRef with a name and key", d.Name)}
				}
			}
		}
	}
	return nil
}

// checkMonitor checks that a ServiceMonitor selects the Sluice Service, in
// its namespace, and scrapes /metrics on its HTTP port.
func checkMonitor(m *manifests, sm *serviceMonitor, sl *sluiceSettings) []error {
	var errs []error
	where := "ServiceMonitor " + sm.Metadata.Name
	svc := m.services[sluiceName]
	if svc == nil || !selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
		errs = append(errs, fmt.Errorf("%s: selector %v does not select Service %s", where, sm.Spec.Selector.MatchLabels, sluiceName))
	}
	if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{releaseNS}) {
		errs = append(errs, fmt.Errorf("%s: namespaceSelector %v, want [%s]", where, sm.Spec.NamespaceSelector.MatchNames, releaseNS))
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != httpPortName || sm.Spec.Endpoints[0].Path != "/metrics" || !sl.routes["/metrics"] {
		errs = append(errs, fmt.Errorf("%s: endpoints %+v, want /metrics on port %s", where, sm.Spec.Endpoints, httpPortName))
	}
	return errs
}

// TestHelmConfigIsRepoConfig keeps the chart's default config equal to
// config/edge.yaml, as the kustomize copy is.
func TestHelmConfigIsRepoConfig(t *testing.T) {
	want, err := os.ReadFile(repoConfig)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(chartConfig)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s; run: cp config/edge.yaml deploy/%s", chartConfig, repoConfig, chartConfig)
	}
	if _, err := descriptors.Parse(descriptors.Source{Name: chartConfig, Data: got}); err != nil {
		t.Error(err)
	}
}

// TestHelmChartRejects proves the schema, the chart's own guard and the
// checks bite: each case gives values a person might, and the render or
// the checks must report it.
func TestHelmChartRejects(t *testing.T) {
	const redis = "redis:\n  url: redis://redis.cache.svc.cluster.local:6379/0\n" + envoyPeers
	for _, tc := range []struct{ name, values, want string }{
		{"no Redis", envoyPeers, "set redis.url or redis.existingSecret"},
		{"no Envoy selector", "redis:\n  url: redis://r.cache.svc:6379/0\n", "set networkPolicy.envoy to select your Envoy's pods"},
		{"Envoy from every namespace", "redis:\n  url: redis://r.cache.svc:6379/0\nnetworkPolicy:\n  envoy:\n    - namespaceSelector: {}\n", "every namespace"},
		{"scraper from every source", redis + "  scraper:\n    - ipBlock: {cidr: 0.0.0.0/0}\n", "admits 0.0.0.0/0"},
		{"misspelt peer", "redis:\n  url: redis://r.cache.svc:6379/0\nnetworkPolicy:\n  envoy:\n    - podSelectr: {}\n", "podSelectr"},
		{"one replica", redis + "replicaCount: 1\n", "/replicaCount"},
		{"misspelt value", redis + "replicas: 3\n", "'replicas' not allowed"},
		{"latest tag", redis + "image:\n  tag: latest\n", "/image/tag"},
		{"not a Redis URL", "redis:\n  url: http://redis:6379\n", "/redis/url"},
		{"not a duration", redis + "shutdown:\n  delay: 5\n", "/shutdown/delay"},
		{"config file not YAML", redis + "config:\n  files:\n    edge.json: '{}'\n", "'edge.json' does not match pattern"},
		{"config that does not load", redis + "config:\n  files:\n    edge.yaml: |\n      domain: edge\n      descriptors:\n        - key: a\n          rate_limit: {unit: minutes, requests_per_unit: 1}\n", `unknown unit "minutes"`},
		{"no shutdown delay", redis + "shutdown:\n  delay: 0s\n", "SLUICE_SHUTDOWN_DELAY must be positive"},
		{"grace period too short", redis + "terminationGracePeriodSeconds: 15\n", "terminationGracePeriodSeconds"},
		{"env that is no setting", redis + "env:\n  SLUICE_LOGLEVEL: debug\n", "SLUICE_LOGLEVEL is not a Sluice setting"},
		{"env set twice", redis + "env:\n  SLUICE_LOG_LEVEL: debug\n", "SLUICE_LOG_LEVEL is set twice"},
		{"HPA below two", redis + "autoscaling:\n  enabled: true\n  minReplicas: 1\n", "/autoscaling/minReplicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, releaseName, releaseNS, tc.values)
			var errs []error
			if err != nil {
				errs = []error{err}
			} else {
				m, lerrs := loadRendered(out)
				errs = append(lerrs, checkChart(m, sluiceSrc)...)
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

// TestHelmChartNames: a release whose name does not say sluice gets its
// objects named release-sluice, and every reference follows.
func TestHelmChartNames(t *testing.T) {
	out, err := render(t, "edge", "rate-limit", "redis:\n  url: redis://redis.cache.svc.cluster.local:6379/0\n"+envoyPeers)
	if err != nil {
		t.Fatal(err)
	}
	m, errs := loadRendered(out)
	for _, err := range errs {
		t.Error(err)
	}
	d := m.deployments["edge-sluice"]
	if d == nil || m.services["edge-sluice"] == nil || m.configMaps["edge-sluice-config"] == nil {
		t.Fatalf("want Deployment, Service and ConfigMap edge-sluice(-config), got %v", slices.Sorted(maps.Keys(m.deployments)))
	}
	if v := d.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].ConfigMap == nil || v[0].ConfigMap.Name != "edge-sluice-config" {
		t.Errorf("config volume %+v, want ConfigMap edge-sluice-config", v)
	}
	if d.Spec.Template.Spec.ServiceAccountName != "edge-sluice" || d.Namespace != "rate-limit" {
		t.Errorf("serviceAccountName %q namespace %q, want edge-sluice in rate-limit", d.Spec.Template.Spec.ServiceAccountName, d.Namespace)
	}
	for _, err := range checkSelectors(m) {
		t.Error(err)
	}
}
