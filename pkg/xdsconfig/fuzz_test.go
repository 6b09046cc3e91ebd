package xdsconfig_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/xdstest"
	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/xdsconfig"
)

// FuzzBuild feeds two resources of any bytes to Build, as an xDS response
// carries them: it must never panic, must return exactly one of a Config
// and an error, and every error must be a *descriptors.Error positioned
// by resource and field path ("xds:<name>: <path>: message"), without a
// line or column.
func FuzzBuild(f *testing.F) {
	marshal := func(rc *rlsconfv3.RateLimitConfig) []byte {
		b, err := proto.Marshal(rc)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	files, _ := filepath.Glob(filepath.Join(xdstest.Testdata(), "*.yaml"))
	for _, file := range files {
		// Envoy Gateway's outputs, two resources of one file when it has
		// them, so mutations reach every field they use.
		rcs, err := xdstest.ReadYAML(file)
		if err != nil {
			f.Fatal(err)
		}
		second := []byte{}
		if len(rcs) > 1 {
			second = marshal(rcs[1])
		}
		f.Add(marshal(rcs[0]), second)
	}
	// Every field of the proto set, an unlimited limit, replaces, and a
	// unit the proto does not know.
	full := &rlsconfv3.RateLimitConfig{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", Value: "v*", ShadowMode: true, DetailedMetric: true, RateLimit: &rlsconfv3.RateLimitPolicy{
			Unit: rlsconfv3.RateLimitUnit_YEAR, RequestsPerUnit: 1, Name: "n", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "m"}}},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k2", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Name: "m"}}}},
		{Key: "u", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: 42}},
	}}
	f.Add(marshal(full), marshal(full)) // the same name and domain twice
	f.Add([]byte{}, []byte{0xff})       // an empty resource, and bytes that are no proto
	f.Fuzz(func(t *testing.T, a, b []byte) {
		resources := []*anypb.Any{{TypeUrl: xdsconfig.TypeURL, Value: a}, {TypeUrl: xdsconfig.TypeURL, Value: b}}
		names := map[string]bool{"xds:resources[0]": true, "xds:resources[1]": true}
		for _, data := range [][]byte{a, b} {
			rc := new(rlsconfv3.RateLimitConfig)
			if proto.Unmarshal(data, rc) == nil && rc.GetName() != "" {
				names["xds:"+rc.GetName()] = true
			}
		}
		cfg, err := xdsconfig.Build(resources)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Build = %v, %v: want exactly one of a Config and an error", cfg, err)
		}
		if err != nil {
			checkPositioned(t, err, names)
		}
	})
}

// checkPositioned fails t for an error of err that is not an
// *descriptors.Error on one of files with a path.
func checkPositioned(t *testing.T, err error, files map[string]bool) {
	t.Helper()
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	for _, e := range list {
		var de *descriptors.Error
		if !errors.As(e, &de) {
			t.Fatalf("error %q (%T) is not a *descriptors.Error", e, e)
		}
		prefix := fmt.Sprintf("%s: %s: ", de.File, de.Path)
		if !files[de.File] || de.Line != 0 || de.Column != 0 || (de.Path == "" && !strings.HasPrefix(de.Msg, "too many errors")) ||
			(de.Path != "" && !strings.HasPrefix(e.Error(), prefix)) {
			t.Fatalf("error %q: file %q (want one of %v), line %d, column %d, path %q: want \"xds:<name>: <path>: ...\"",
				e, de.File, files, de.Line, de.Column, de.Path)
		}
	}
}
