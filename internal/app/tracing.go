package app

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"

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

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

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
// connects when it first exports. A non-nil exporter (tests) replaces the
// OTLP one and exports every span as it ends.
func newTracing(ctx context.Context, s *settings.TracingSettings, exporter sdktrace.SpanExporter) (*tracing, error) {
	if !s.TracingEnabled {
		return nil, nil
	}
	export := sdktrace.WithSyncer(exporter)
	if exporter == nil {
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
	attrs := []attribute.KeyValue{semconv.ServiceName(s.TracingServiceName), semconv.ServiceInstanceID(id), semconv.ServiceVersion(versionString())}
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

// storeSpans returns the observer that records a child span of the
// request's for every store call, named for kind ("redis" or "memory").
func (t *tracing) storeSpans(kind string) ratelimit.StoreObserver {
	return &storeSpans{tracer: t.tp.Tracer("github.com/sluicehq/sluice/cmd/server"), kind: kind}
}

// storeSpans makes a span of every store call from the decision's own
// timing of it, after the call: nothing below the decision reads the span.
type storeSpans struct {
	tracer trace.Tracer
	kind   string
}

// ObserveStore implements ratelimit.StoreObserver: a "store.apply" span
// from the call's start to its end, child of the request's, with the number
// of hits, the store's kind, and the error if it failed.
func (t *storeSpans) ObserveStore(ctx context.Context, c ratelimit.StoreCall) {
	_, span := t.tracer.Start(ctx, "store.apply", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(c.Start),
		trace.WithAttributes(attribute.String("sluice.store", t.kind), attribute.Int("ratelimit.hits", c.Hits)))
	if span.IsRecording() {
		if t.kind == "redis" {
			span.SetAttributes(semconv.DBSystemNameRedis)
		}
		if c.Err != nil {
			span.RecordError(c.Err)
			span.SetStatus(codes.Error, c.Err.Error())
		}
	}
	span.End(trace.WithTimestamp(c.Start.Add(c.Took)))
}
