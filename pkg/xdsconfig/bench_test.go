package xdsconfig

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/xdstest"
	"github.com/sluicehq/sluice/pkg/descriptors"
)

type discard struct{}

func (discard) Send(*discoveryv3.DiscoveryRequest) error { return nil }

// refusedResponse is a response of every Envoy Gateway config the
// project keeps, one of them broken.
func refusedResponse(b *testing.B) *discoveryv3.DiscoveryResponse {
	files, _ := filepath.Glob(filepath.Join(xdstest.Testdata(), "*.yaml"))
	resp := &discoveryv3.DiscoveryResponse{TypeUrl: TypeURL, VersionInfo: "7", Nonce: "n"}
	for i, f := range files {
		rcs, err := xdstest.ReadYAML(f)
		if err != nil {
			b.Fatal(err)
		}
		for _, rc := range rcs {
			rc.Name, rc.Domain = rc.Name+f, rc.Domain+f // one domain per resource
			if i == 0 {
				rc.Descriptors[0].Key = "" // refused: empty key
			}
			a, _ := anypb.New(rc)
			resp.Resources = append(resp.Resources, a)
		}
	}
	return resp
}

// BenchmarkNACKResend compares what a server's re-send of a refused
// snapshot costs: built again (as envoyproxy/ratelimit does), or answered
// from the first refusal (repeat, with the hold set to nothing here).
func BenchmarkNACKResend(b *testing.B) {
	resp := refusedResponse(b)
	b.Run("rebuild", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Build(resp.Resources); err == nil {
				b.Fatal("built")
			}
		}
	})
	b.Run("answered-from-first-refusal", func(b *testing.B) {
		c, _ := New(Options{Server: "x:1", Node: &corev3.Node{Id: "n"}, NackHold: time.Nanosecond})
		deliver := func(*descriptors.Config, error) {}
		if err := c.handle(context.Background(), discard{}, resp, deliver); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := c.handle(context.Background(), discard{}, resp, deliver); err != nil {
				b.Fatal(err)
			}
		}
	})
}
