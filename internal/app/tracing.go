package app

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// tracingSettings are the OpenTelemetry settings (rows in settings.table).
// Each also reads envoyproxy/ratelimit's name for it (TRACING_ENABLED, ...,
// rows of peerVars) and, after that, the OpenTelemetry variable the peer
// falls back to: see otelVar. The exporter itself reads the standard
// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, certificate, timeout,
// compression), as the peer's does.
type tracingSettings struct {
	TracingEnabled           bool
	TracingExporterProtocol  string
	TracingServiceName       string
	TracingServiceNamespace  string
	TracingServiceInstanceID string
	TracingSamplingRate      string

	// exporter, when set (tests only), replaces the OTLP exporter and
	// exports every span as it ends.
	exporter sdktrace.SpanExporter
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
func (s *tracingSettings) validateTracing() error {
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

// tracing is what a server with tracing on needs: a tracer provider and the
// propagators that read the trace context Envoy sends.
type tracing struct {
	tp    trace.TracerProvider
	prop  propagation.TextMapPropagator
	close func(context.Context) error
}

// propagators reads W3C traceparent/tracestate and baggage (Envoy's
// OpenTelemetry tracer) and B3, single and multi header (its Zipkin tracer).
func propagators() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{},
		b3.New(b3.WithInjectEncoding(b3.B3MultipleHeader|b3.B3SingleHeader)))
}

// newTracing builds the OTLP exporter and tracer provider the settings ask
// for; nil when tracing is off. Nothing is dialled here: the exporter
// connects when it first exports.
func newTracing(ctx context.Context, s *tracingSettings) (*tracing, error) {
	if !s.TracingEnabled {
		return nil, nil
	}
	export := sdktrace.WithSyncer(s.exporter)
	if s.exporter == nil {
		var exp sdktrace.SpanExporter
		var err error
		if s.TracingExporterProtocol == "grpc" {
			exp, err = otlptracegrpc.New(ctx)
		} else {
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp %s exporter: %w", s.TracingExporterProtocol, err)
		}
		export = sdktrace.WithBatcher(exp)
	}
	id := s.TracingServiceInstanceID
	if id == "" {
		id = rand.Text() // the peer uses a random UUID; any unique id will do
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(s.TracingServiceName), semconv.ServiceInstanceID(id), semconv.ServiceVersion(version)}
	if s.TracingServiceNamespace != "" {
		attrs = append(attrs, semconv.ServiceNamespace(s.TracingServiceNamespace))
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithAttributes(attrs...))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	rate, _ := strconv.ParseFloat(s.TracingSamplingRate, 64)
	tp := sdktrace.NewTracerProvider(export, sdktrace.WithResource(res),
		// Envoy's sampling decision, when it sent one, wins.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(rate))))
	return &tracing{tp: tp, prop: propagators(), close: tp.Shutdown}, nil
}

// serverOptions makes the gRPC server continue the trace context Envoy sends
// in the call's metadata: one server span per ShouldRateLimit, which pkg/rls
// annotates with the decision.
func (t *tracing) serverOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.tp), otelgrpc.WithPropagators(t.prop)))}
}

// wrapStore returns s with a child span around every store call; s itself
// when tracing is off.
func (t *tracing) wrapStore(s limiter.Store, kind string) limiter.Store {
	if t == nil {
		return s
	}
	return &tracedStore{Store: s, tracer: t.tp.Tracer("github.com/sluicehq/sluice/cmd/server"), kind: kind}
}

// tracedStore puts a span around every Apply.
type tracedStore struct {
	limiter.Store
	tracer trace.Tracer
	kind   string
}

// Apply calls the wrapped store inside a "store.apply" span: the number of
// hits, the store's kind, and the error if it failed.
func (t *tracedStore) Apply(ctx context.Context, hits []limiter.Hit) ([]limiter.Result, error) {
	ctx, span := t.tracer.Start(ctx, "store.apply", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("sluice.store", t.kind), attribute.Int("ratelimit.hits", len(hits))))
	defer span.End()
	if t.kind == "redis" {
		span.SetAttributes(semconv.DBSystemNameRedis)
	}
	res, err := t.Store.Apply(ctx, hits)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return res, err
}
