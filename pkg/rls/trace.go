package rls

import (
	"context"
	"slices"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// Span attributes of a ShouldRateLimit call (OpenTelemetry). The span is
// the caller's: internal/app's gRPC stats handler starts one per call,
// continuing the trace context Envoy sent in the call's metadata.
const (
	// AttrDomain is the request's domain.
	AttrDomain = attribute.Key("ratelimit.domain")
	// AttrDescriptors is the number of descriptors in the request.
	AttrDescriptors = attribute.Key("ratelimit.descriptors")
	// AttrCode is the decision: "OK" or "OVER_LIMIT" (overall_code).
	AttrCode = attribute.Key("ratelimit.overall_code")
	// AttrLimits lists the names of the limits counted (as in RateLimit-Policy),
	// in descriptor order, each once.
	AttrLimits = attribute.Key("ratelimit.limit_names")
	// AttrOverLimits lists the names of the limits that were over limit.
	AttrOverLimits = attribute.Key("ratelimit.over_limit_names")
	// AttrFailureMode is the failure mode that answered because the store
	// failed ("allow", "deny"); absent when the store answered.
	AttrFailureMode = attribute.Key("ratelimit.failure_mode")
)

// annotate sets the decision's attributes on ctx's span, when it records:
// tracing costs nothing when it is off or the trace is not sampled.
func annotate(ctx context.Context, req *rlsv3.RateLimitRequest, d *ratelimit.Decision) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(AttrDomain.String(req.GetDomain()), AttrDescriptors.Int(len(req.GetDescriptors())))
	if d == nil {
		return
	}
	var names, over []string
	for i := range d.Statuses {
		st := &d.Statuses[i]
		if !st.Counted() {
			continue
		}
		if !slices.Contains(names, st.Name) {
			names = append(names, st.Name)
		}
		if st.Code == ratelimit.OverLimit && !slices.Contains(over, st.Name) {
			over = append(over, st.Name)
		}
	}
	span.SetAttributes(AttrCode.String(d.Code.String()), AttrLimits.StringSlice(names))
	if len(over) > 0 {
		span.SetAttributes(AttrOverLimits.StringSlice(over))
	}
	if d.FailureMode != 0 {
		span.SetAttributes(AttrFailureMode.String(d.FailureMode.String()))
	}
}
