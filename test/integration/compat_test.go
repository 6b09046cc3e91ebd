//go:build compat

// TestCompatDeploymentCopies keeps testdata/dropin's copies of the
// Deployments equal to the originals in shared/compat, beside the
// repository (behind the "compat" build tag: 'make compat' runs it, 'make
// test' needs no shared/).

package integration

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestCompatDeploymentCopies(t *testing.T) {
	shared := filepath.Join("..", "..", "..", "shared", "compat")
	for copyName, original := range map[string]string{
		"istio-rate-limit-service.yaml":           filepath.Join(shared, "istio", "rate-limit-service.yaml"),
		"envoy-gateway-ratelimit-deployment.yaml": filepath.Join(shared, "envoy-gateway", "ratelimit-deployment.yaml"),
	} {
		data, err := os.ReadFile(original)
		if err != nil {
			t.Fatalf("%v; the shared/ folder must sit beside the repository root (../shared from it)", err)
		}
		var orig container
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc struct {
				Kind string `yaml:"kind"`
			}
			var node yaml.Node
			if err := dec.Decode(&node); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", original, err)
			}
			if node.Decode(&doc); doc.Kind != "Deployment" {
				continue
			}
			var d deployment
			if err := node.Decode(&d); err != nil {
				t.Fatal(err)
			}
			orig = d.Spec.Template.Spec.Containers[0]
		}
		if got := loadDeployment(t, copyName); !reflect.DeepEqual(got, orig) {
			t.Errorf("testdata/dropin/%s differs from %s:\ncopy:     %+v\noriginal: %+v", copyName, original, got, orig)
		}
	}
}
