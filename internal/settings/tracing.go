package settings

import (
	"fmt"
	"strconv"
	"strings"
)

// TracingSettings are the OpenTelemetry settings (rows in the settings table).
// Each also reads envoyproxy/ratelimit's name for it (TRACING_ENABLED, ...,
// rows of peerVars) and, after that, the OpenTelemetry variable the peer
// falls back to: see otelVar. The exporter itself reads the standard
// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, certificate, timeout,
// compression), as the peer's does.
type TracingSettings struct {
	TracingEnabled           bool
	TracingExporterProtocol  string
	TracingServiceName       string
	TracingServiceNamespace  string
	TracingServiceInstanceID string
	TracingSamplingRate      string
}

// applyOtelFallbacks applies the OpenTelemetry variables that
// envoyproxy/ratelimit reads in place of its unset TRACING_* settings (the
// peer's ApplyOtelTracingFallbacks): each tracing setting whose TRACING_*
// name is unset takes the value otelFallback derives, as one more peer
// value. Precedence: flag > SLUICE_TRACING_* > TRACING_* > OTEL_* > default.
// It returns an error naming the variable for a sampling rate that is not a
// number. (The exporter reads OTEL_EXPORTER_OTLP_* itself.)
func applyOtelFallbacks(p *peerEnv) error {
	for _, peer := range []string{"TRACING_ENABLED", "TRACING_EXPORTER_PROTOCOL", "TRACING_SERVICE_NAME",
		"TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_SAMPLING_RATE"} {
		if p.get(peer) != "" {
			continue
		}
		v, from := otelFallback(peer, p.get)
		if v == "" {
			continue
		}
		if peer == "TRACING_SAMPLING_RATE" {
			if err := checkKind(from, v, "float"); err != nil {
				return err
			}
		}
		p.set("tracing-"+strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(peer, "TRACING_")), "_", "-"), v, from)
	}
	return nil
}

// otelFallback is the value the OpenTelemetry variables give a peer
// tracing setting, and the variable it came from; "" when they say nothing.
func otelFallback(peer string, get func(string) string) (v, from string) {
	attr := func(key string) string {
		for _, kv := range strings.Split(get("OTEL_RESOURCE_ATTRIBUTES"), ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(k) == key {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	lower := func(n string) string { return strings.ToLower(get(n)) }
	switch peer {
	case "TRACING_ENABLED":
		if lower("OTEL_SDK_DISABLED") == "true" {
			return "false", "OTEL_SDK_DISABLED"
		}
		if e := lower("OTEL_TRACES_EXPORTER"); e != "" {
			return strconv.FormatBool(e != "none"), "OTEL_TRACES_EXPORTER"
		}
	case "TRACING_EXPORTER_PROTOCOL":
		switch p := lower("OTEL_EXPORTER_OTLP_PROTOCOL"); {
		case p == "grpc":
			return "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL"
		case strings.HasPrefix(p, "http"):
			return "http", "OTEL_EXPORTER_OTLP_PROTOCOL"
		}
	case "TRACING_SERVICE_NAME":
		return get("OTEL_SERVICE_NAME"), "OTEL_SERVICE_NAME"
	case "TRACING_SERVICE_NAMESPACE":
		return attr("service.namespace"), "OTEL_RESOURCE_ATTRIBUTES"
	case "TRACING_SERVICE_INSTANCE_ID":
		return attr("service.instance.id"), "OTEL_RESOURCE_ATTRIBUTES"
	case "TRACING_SAMPLING_RATE":
		switch lower("OTEL_TRACES_SAMPLER") {
		case "always_on":
			return "1", "OTEL_TRACES_SAMPLER"
		case "always_off":
			return "0", "OTEL_TRACES_SAMPLER"
		case "traceidratio", "parentbased_traceidratio":
			return get("OTEL_TRACES_SAMPLER_ARG"), "OTEL_TRACES_SAMPLER_ARG"
		}
	}
	return "", ""
}

// validateTracing checks the tracing settings.
func (s *TracingSettings) validate() error {
	switch s.TracingExporterProtocol {
	case "http", "grpc":
	default:
		return fmt.Errorf("--tracing-exporter-protocol: unknown protocol %q (want http or grpc)", s.TracingExporterProtocol)
	}
	if r, err := strconv.ParseFloat(s.TracingSamplingRate, 64); err != nil || r < 0 || r > 1 {
		return fmt.Errorf("--tracing-sampling-rate: %q is not a number in [0, 1]", s.TracingSamplingRate)
	}
	return nil
}
