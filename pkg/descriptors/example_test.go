package descriptors_test

import (
	"fmt"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// ExampleBuild builds a Config from Documents made by hand, as a source that
// is not YAML (an xDS RateLimitConfig resource) does: no positions, so the
// errors are positioned by the resource name and the field path.
func ExampleBuild() {
	doc := &descriptors.Document{
		File:   "xds:first-listener",
		Domain: descriptors.Set("first-listener"),
		Descriptors: []*descriptors.Node{{
			Key: descriptors.Set("remote_address"),
			RateLimit: &descriptors.RateLimitNode{
				Unit:            descriptors.Set("MINUTE"),
				RequestsPerUnit: descriptors.Set(uint32(10)),
			},
		}},
	}
	c, err := descriptors.Build(doc)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := c.Match("first-listener", []descriptors.Entry{{Key: "remote_address", Value: "10.0.0.1"}})
	fmt.Println(r.FullKey, r.Limit.RequestsPerUnit, r.Limit.Unit)

	doc.Descriptors[0].RateLimit.Unit = descriptors.Set("FORTNIGHT")
	_, err = descriptors.Build(doc)
	fmt.Println(err)
	// Output:
	// first-listener.remote_address 10 minute
	// xds:first-listener: descriptors[0].rate_limit.unit: unknown unit "FORTNIGHT" (want second, minute, hour, day, week, month or year)
}
