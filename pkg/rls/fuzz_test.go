package rls

import (
	"context"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzShouldRateLimit builds a request from fuzzed parts and requires that
// the service never panics, answers one status per descriptor, and fails
// only with INVALID_ARGUMENT, only for a shape that validation rejects.
func FuzzShouldRateLimit(f *testing.F) {
	// domain, "k=v|k=v;k=v" descriptors, request hits, descriptor hits (0 =
	// unset, else value-1), override unit, negative.
	f.Add("test", "api_key=a", uint32(0), uint64(0), int32(0), false)                        // a plain limited key
	f.Add("test", "api_key=a|route=search;api_key=a", uint32(1), uint64(0), int32(0), false) // nested plus parent
	f.Add("", "api_key=a", uint32(0), uint64(0), int32(0), false)                            // empty domain
	f.Add("test", "", uint32(0), uint64(0), int32(0), false)                                 // no descriptors
	f.Add("test", "=v", uint32(0), uint64(0), int32(0), false)                               // empty key
	f.Add("test", "api_key=\xff\xfe", ^uint32(0), ^uint64(0), int32(0), false)               // bad UTF-8, max hits
	f.Add("test", "files=files/x", uint32(2), uint64(3), int32(2), true)                     // override and refund
	f.Add("test", "service=a;service=b", uint32(0), uint64(1), int32(99), false)             // quota mode, unknown unit
	f.Fuzz(func(t *testing.T, domain, spec string, reqHits uint32, descHits uint64, unit int32, negative bool) {
		s, _ := newTestService(t, Options{MaxDescriptors: 16, MaxEntries: 8})
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: reqHits}
		if spec != "" {
			for _, ds := range strings.Split(spec, ";") {
				d := &rlcommon.RateLimitDescriptor{IsNegativeHits: negative}
				for _, kv := range strings.Split(ds, "|") {
					k, v, _ := strings.Cut(kv, "=")
					if kv == "" {
						continue
					}
					d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
				}
				if descHits > 0 {
					d.HitsAddend = wrapperspb.UInt64(descHits - 1)
				}
				if unit != 0 {
					d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(descHits), Unit: typev3.RateLimitUnit(unit)}
				}
				req.Descriptors = append(req.Descriptors, d)
			}
		}
		resp, err := s.ShouldRateLimit(context.Background(), req)
		verr := s.validate(req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument || verr == nil {
				t.Fatalf("ShouldRateLimit error %v (validate: %v)", err, verr)
			}
			return
		}
		if verr != nil {
			t.Fatalf("validate rejects (%v) but the call succeeded", verr)
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
	})
}

// BenchmarkShouldRateLimit measures one call on the in-memory store: one
// descriptor under its limit, and three descriptors (one nested).
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, bc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"1_descriptor", request(desc("generous", "g"))},
		{"3_descriptors", request(desc("generous", "g"), desc("api_key", "a", "route", "search"), desc("nothing", "x"))},
		{"no_limit", request(desc("nothing", "x"))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, _ := newTestService(b, Options{Headers: HeadersDraft})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.ShouldRateLimit(ctx, bc.req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
	b.Run("parallel_distinct_keys", func(b *testing.B) {
		s, _ := newTestService(b, Options{Headers: HeadersDraft})
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				req := request(desc("wild", "w"+itoa(uint64(i%1000))))
				if _, err := s.ShouldRateLimit(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
}
