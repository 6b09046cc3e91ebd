package deploy_test

import (
	"slices"
	"strings"
	"testing"
)

// chartOwnDefaults are the settings whose chart default differs from the
// binary's on purpose, and why. Every other setting the chart sets by
// default must have the binary's default, so that the chart and the binary
// have one default each (the chart once sent draft,compat headers where
// the binary sends draft).
var chartOwnDefaults = map[string]string{
	"SLUICE_CONFIG":         "the ConfigMap's mount",
	"SLUICE_LOG_FORMAT":     "json, what auto picks without a terminal, said outright",
	"SLUICE_SHUTDOWN_DELAY": "endpoints and Envoy stop sending to a terminating pod first",
	"SLUICE_REDIS_URL":      "the user's Redis",
}

// TestHelmDefaultsAreTheBinarys renders the chart with only a Redis URL
// and the Envoy peers its NetworkPolicy requires, and compares every SLUICE_* value of its container with the binary's
// default, read from the settings table.
func TestHelmDefaultsAreTheBinarys(t *testing.T) {
	sl, err := readSluice(sluiceSrc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := render(t, releaseName, releaseNS, "redis:\n  url: redis://redis.cache.svc.cluster.local:6379/0\n"+envoyPeers)
	if err != nil {
		t.Fatal(err)
	}
	m, errs := loadRendered(out)
	for _, err := range errs {
		t.Error(err)
	}
	d := m.deployments[sluiceName]
	if d == nil {
		t.Fatalf("no Deployment %s", sluiceName)
	}
	var checked []string
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			def, ok := sl.env[e.Name]
			if !ok || chartOwnDefaults[e.Name] != "" {
				continue // not a setting (checkSluice refuses those), or the chart's own
			}
			checked = append(checked, e.Name)
			if e.Value != def {
				t.Errorf("values.yaml sets %s=%q by default, the binary's default is %q (%s): make them one, or say why in chartOwnDefaults",
					e.Name, e.Value, def, sl.settings)
			}
		}
	}
	if !slices.Contains(checked, "SLUICE_RESPONSE_HEADERS") {
		t.Errorf("checked %s, want SLUICE_RESPONSE_HEADERS among them", strings.Join(checked, ", "))
	}
}
