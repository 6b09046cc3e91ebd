package xdstest

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// Entry is one descriptor entry of a call.
type Entry struct{ Key, Value string }

// Call is a rate limit call to one limit of a RateLimitConfig, with the
// descriptor Envoy sends for it under the route actions Envoy Gateway's
// translator writes for that config (buildRouteRateLimits): a generic_key
// per route or shared policy (key and value as in the config), a
// header_value_match per header match (key and value as in the config), a
// request_headers per distinct header match (the key with a header's
// value, ""-valued in the config), masked_remote_address (the client
// address masked to the config's prefix length, as Envoy formats it) and
// remote_address (the client address itself) for a CIDR match.
type Call struct {
	Domain  string
	Entries []Entry
	// Limit is the leaf's rate limit; ShadowMode its shadow_mode.
	Limit      *rlsconfv3.RateLimitPolicy
	ShadowMode bool
}

// Calls returns one Call per descriptor with a rate limit in rc, in
// config order. Every distinct header sends value; the client address is
// taken inside each masked_remote_address prefix (the fifth address of
// it, or the address itself for a /32).
func Calls(rc *rlsconfv3.RateLimitConfig, value string) ([]Call, error) {
	var out []Call
	var walk func(ds []*rlsconfv3.RateLimitDescriptor, prefix []Entry, client netip.Addr) error
	walk = func(ds []*rlsconfv3.RateLimitDescriptor, prefix []Entry, client netip.Addr) error {
		for _, d := range ds {
			e := Entry{d.GetKey(), d.GetValue()}
			switch {
			case d.GetKey() == "masked_remote_address":
				if p, err := netip.ParsePrefix(d.GetValue()); err == nil {
					client = inside(p)
					// What Envoy sends: the client address masked to the
					// prefix length, as "address/length".
					e.Value = netip.PrefixFrom(client, p.Bits()).Masked().String()
				}
			case d.GetKey() == "remote_address" && d.GetValue() == "":
				if !client.IsValid() {
					return fmt.Errorf("remote_address without a masked_remote_address above it")
				}
				e.Value = client.String()
			case d.GetValue() == "":
				e.Value = value
			}
			entries := append(append([]Entry(nil), prefix...), e)
			if rl := d.GetRateLimit(); rl != nil {
				out = append(out, Call{Domain: rc.GetDomain(), Entries: entries, Limit: rl, ShadowMode: d.GetShadowMode()})
			}
			if err := walk(d.GetDescriptors(), entries, client); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(rc.GetDescriptors(), nil, netip.Addr{}); err != nil {
		return nil, fmt.Errorf("%s: %w", rc.GetName(), err)
	}
	return out, nil
}

// inside returns an address inside p: its fifth, or its only one.
func inside(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr()
	for i := 0; i < 5 && p.Bits() < a.BitLen(); i++ {
		a = a.Next()
	}
	return a
}

// Testdata is the directory of the copies of Envoy Gateway's rate limit
// configs this package keeps (testdata/envoy-gateway).
func Testdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "envoy-gateway")
}
