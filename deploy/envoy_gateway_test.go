package deploy_test

import (
	"net"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// envoyGateway mirrors the part of Envoy Gateway's EnvoyGateway type
// (gateway.envoyproxy.io/v1alpha1, api/v1alpha1/envoygateway_types.go) that
// deploy/envoy-gateway uses, with the same JSON names, so that strict
// decoding refuses a misspelt or misplaced field.
type envoyGateway struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Gateway    *struct {
		ControllerName string `json:"controllerName"`
	} `json:"gateway,omitempty"`
	Logging *struct {
		Level map[string]string `json:"level"`
	} `json:"logging,omitempty"`
	Provider struct {
		Type       string `json:"type"`
		Kubernetes *struct {
			RateLimitDeployment *struct {
				Replicas  *int32 `json:"replicas,omitempty"`
				Container *struct {
					Image     string                       `json:"image,omitempty"`
					Env       []corev1.EnvVar              `json:"env,omitempty"`
					Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
				} `json:"container,omitempty"`
			} `json:"rateLimitDeployment,omitempty"`
		} `json:"kubernetes,omitempty"`
	} `json:"provider"`
	RateLimit *struct {
		Backend struct {
			Type  string `json:"type"`
			Redis *struct {
				URL string `json:"url"`
			} `json:"redis,omitempty"`
		} `json:"backend"`
	} `json:"rateLimit,omitempty"`
}

// TestEnvoyGatewayConfig decodes deploy/envoy-gateway strictly: the
// ConfigMap Envoy Gateway reads its configuration from, and the same
// configuration as Helm values, which must agree. It checks that the
// configuration swaps the rate limit image for Sluice's and gives a Redis,
// and that the image runs as Envoy Gateway's Deployment runs it.
func TestEnvoyGatewayConfig(t *testing.T) {
	var cm corev1.ConfigMap
	decodeStrict(t, "envoy-gateway/envoy-gateway-config.yaml", &cm)
	if cm.Kind != "ConfigMap" || cm.Name != "envoy-gateway-config" || cm.Namespace != "envoy-gateway-system" {
		t.Errorf("ConfigMap %s %s/%s, want envoy-gateway-system/envoy-gateway-config (the one Envoy Gateway reads)", cm.Kind, cm.Namespace, cm.Name)
	}
	var eg envoyGateway
	if err := sigsyaml.UnmarshalStrict([]byte(cm.Data["envoy-gateway.yaml"]), &eg); err != nil {
		t.Fatalf("envoy-gateway.yaml: %v", err)
	}
	if eg.APIVersion != "gateway.envoyproxy.io/v1alpha1" || eg.Kind != "EnvoyGateway" || eg.Provider.Type != "Kubernetes" {
		t.Errorf("envoy-gateway.yaml is %s %s with provider %q, want an EnvoyGateway of gateway.envoyproxy.io/v1alpha1 on Kubernetes",
			eg.APIVersion, eg.Kind, eg.Provider.Type)
	}
	k := eg.Provider.Kubernetes
	if k == nil || k.RateLimitDeployment == nil || k.RateLimitDeployment.Container == nil ||
		!strings.Contains(k.RateLimitDeployment.Container.Image, "sluice") {
		t.Errorf("provider.kubernetes.rateLimitDeployment.container.image is not a Sluice image: %+v", k)
	}
	if rl := eg.RateLimit; rl == nil || rl.Backend.Type != "Redis" || rl.Backend.Redis == nil {
		t.Errorf("rateLimit.backend: %+v, want type Redis with a url", rl)
	} else if _, _, err := net.SplitHostPort(rl.Backend.Redis.URL); err != nil {
		t.Errorf("rateLimit.backend.redis.url %q: want host:port, as Envoy Gateway passes it to REDIS_URL: %v", rl.Backend.Redis.URL, err)
	}

	var values struct {
		Config struct {
			EnvoyGateway envoyGateway `json:"envoyGateway"`
		} `json:"config"`
	}
	decodeStrict(t, "envoy-gateway/helm-values.yaml", &values)
	fromHelm := values.Config.EnvoyGateway
	fromHelm.APIVersion, fromHelm.Kind = eg.APIVersion, eg.Kind // the chart adds them
	if !reflect.DeepEqual(fromHelm, eg) {
		t.Errorf("helm-values.yaml's config.envoyGateway differs from envoy-gateway-config.yaml's:\n%+v\n%+v", fromHelm, eg)
	}

	// Envoy Gateway runs command /bin/ratelimit as user 65534.
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/out/root/bin/ratelimit", "USER 65534:65534"} {
		if !strings.Contains(string(dockerfile), want) {
			t.Errorf("the Dockerfile lacks %q, which Envoy Gateway's Deployment relies on", want)
		}
	}
}

func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
