package settings

import (
	"io"
	"strings"
	"testing"
)

// TestTracingSettings: tracing is off by default; Sluice's own names win
// over the peer's, which win over the OpenTelemetry variables the peer falls
// back to; bad values are refused naming the setting.
func TestTracingSettings(t *testing.T) {
	parse := func(env map[string]string, args ...string) (*Settings, error) {
		return Parse(args, func(k string) string { return env[k] }, io.Discard)
	}
	s, err := parse(nil)
	if err != nil || s.TracingEnabled || s.TracingExporterProtocol != "http" || s.TracingServiceName != "sluice" || s.TracingSamplingRate != "1" {
		t.Fatalf("defaults: %+v, %v", s.TracingSettings, err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want TracingSettings
	}{
		{"peer names", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SAMPLING_RATE": "0.25"}, nil,
			TracingSettings{TracingEnabled: true, TracingExporterProtocol: "grpc", TracingServiceName: "sluice", TracingSamplingRate: "0.25"}},
		{"sluice names win", map[string]string{"TRACING_ENABLED": "true", "SLUICE_TRACING_ENABLED": "false", "TRACING_SERVICE_NAME": "peer", "SLUICE_TRACING_SERVICE_NAME": "own"}, nil,
			TracingSettings{TracingExporterProtocol: "http", TracingServiceName: "own", TracingSamplingRate: "1"}},
		{"flag wins", map[string]string{"SLUICE_TRACING_ENABLED": "false"}, []string{"--tracing-enabled"},
			TracingSettings{TracingEnabled: true, TracingExporterProtocol: "http", TracingServiceName: "sluice", TracingSamplingRate: "1"}},
		{"otel fallbacks", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "rl",
			"OTEL_RESOURCE_ATTRIBUTES": "service.namespace=ns, service.instance.id=i-1", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}, nil,
			TracingSettings{TracingEnabled: true, TracingExporterProtocol: "http", TracingServiceName: "rl", TracingServiceNamespace: "ns", TracingServiceInstanceID: "i-1", TracingSamplingRate: "0.5"}},
		{"otel sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, nil,
			TracingSettings{TracingExporterProtocol: "http", TracingServiceName: "sluice", TracingSamplingRate: "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parse(tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if s.TracingSettings != tc.want {
				t.Errorf("got %+v, want %+v", s.TracingSettings, tc.want)
			}
		})
	}
	for env, want := range map[string]string{"TRACING_EXPORTER_PROTOCOL": "--tracing-exporter-protocol", "TRACING_SAMPLING_RATE": "--tracing-sampling-rate"} {
		if _, err := parse(map[string]string{env: "2"}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=2: %v, want an error naming %s", env, err, want)
		}
	}
}
