package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// serviceMonitor is the part of a monitoring.coreos.com/v1 ServiceMonitor
// the test reads (the Prometheus Operator's types are not a dependency).
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// TestPrometheusScrape: the Sluice pods carry the prometheus.io/* scrape
// annotations, pointing at the container's HTTP port and a route Sluice
// serves, and the optional ServiceMonitor selects the Sluice Service and
// scrapes its HTTP port there.
func TestPrometheusScrape(t *testing.T) {
	for _, err := range checkScrape(kustomizeDir, sluiceSrc) {
		t.Error(err)
	}
}

func checkScrape(dir, srcDir string) []error {
	sl, err := readSluice(srcDir)
	if err != nil {
		return []error{err}
	}
	m, errs := load(dir)
	if m == nil {
		return errs
	}
	d, svc := m.deployments[sluiceName], m.services[sluiceName]
	if d == nil || svc == nil {
		return append(errs, fmt.Errorf("no Deployment or Service %q", sluiceName))
	}
	a := d.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" {
		errs = append(errs, fmt.Errorf("deployment.yaml: pod annotation prometheus.io/scrape = %q, want \"true\"", a["prometheus.io/scrape"]))
	}
	if !sl.routes[a["prometheus.io/path"]] || a["prometheus.io/path"] != "/metrics" {
		errs = append(errs, fmt.Errorf("deployment.yaml: pod annotation prometheus.io/path = %q, want /metrics (a route Sluice serves)", a["prometheus.io/path"]))
	}
	httpPort := ""
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if c.Name == container && p.Name == httpPortName {
				httpPort = strconv.Itoa(int(p.ContainerPort))
			}
		}
	}
	if a["prometheus.io/port"] != httpPort || httpPort == "" {
		errs = append(errs, fmt.Errorf("deployment.yaml: pod annotation prometheus.io/port = %q, want the container's %s port %s", a["prometheus.io/port"], httpPortName, httpPort))
	}

	raw, err := os.ReadFile(filepath.Join(dir, "prometheus-operator", "servicemonitor.yaml"))
	if err != nil {
		return append(errs, err)
	}
	var sm serviceMonitor
	if err := sigsyaml.UnmarshalStrict(raw, &sm); err != nil {
		return append(errs, fmt.Errorf("servicemonitor.yaml: %w", err))
	}
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != "ServiceMonitor" || sm.Metadata.Namespace != namespace {
		errs = append(errs, fmt.Errorf("servicemonitor.yaml: %s %s in %q, want monitoring.coreos.com/v1 ServiceMonitor in %q", sm.APIVersion, sm.Kind, sm.Metadata.Namespace, namespace))
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			errs = append(errs, fmt.Errorf("servicemonitor.yaml: selector %s=%s does not match Service %s's labels %v", k, v, sluiceName, svc.Labels))
		}
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 || len(sm.Spec.NamespaceSelector.MatchNames) != 1 || sm.Spec.NamespaceSelector.MatchNames[0] != namespace {
		errs = append(errs, fmt.Errorf("servicemonitor.yaml: selects %v in %v, want the Service's labels in %q", sm.Spec.Selector.MatchLabels, sm.Spec.NamespaceSelector.MatchNames, namespace))
	}
	found := false
	for _, p := range svc.Spec.Ports {
		found = found || len(sm.Spec.Endpoints) == 1 && p.Name == sm.Spec.Endpoints[0].Port && p.Name == httpPortName
	}
	if !found || sm.Spec.Endpoints[0].Path != "/metrics" {
		errs = append(errs, fmt.Errorf("servicemonitor.yaml: endpoints %+v, want the Service's %s port and /metrics", sm.Spec.Endpoints, httpPortName))
	}
	return errs
}
