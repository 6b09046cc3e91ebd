package settings

import (
	"io"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// TestDefaults: --algorithm, --sub-windows and --token-bucket-burst (or
// their SLUICE_ twins) become the defaults of the limits that set none,
// each naming its setting; at their defaults, and under envoyproxy/ratelimit's
// variables alone (Envoy Gateway's Deployment), they set nothing; bad
// values name the flag.
func TestDefaults(t *testing.T) {
	env := map[string]string{"SLUICE_TOKEN_BUCKET_BURST": "250%"}
	s, err := Parse([]string{"--algorithm", "Token_Bucket", "--sub-windows", "10"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d := s.Defaults()
	if d.Algorithm.Value != "token_bucket" || d.Algorithm.Pos.File != "--algorithm" || d.SubWindows.Value != 10 ||
		d.BurstPercent.Value != 250 || d.BurstPercent.Pos.File != "--token-bucket-burst" {
		t.Errorf("defaults %+v", d)
	}
	if got, want := s.DefaultsInForce(), "algorithm=token_bucket sub_windows=10 token_bucket_burst=250% failure_mode=error cache=false"; got != want {
		t.Errorf("start-up line %q, want %q", got, want)
	}

	peer := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001",
		"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}
	s, err = Parse(nil, func(k string) string { return peer[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Defaults(); d != (descriptors.Defaults{}) {
		t.Errorf("under envoyproxy/ratelimit's variables: defaults %+v, want none (sliding_window)", d)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--algorithm", "concurrency"}, "--algorithm: unknown \"concurrency\""},
		{[]string{"--sub-windows", "0"}, "--sub-windows: 0 must be 1 to"},
		{[]string{"--token-bucket-burst", "1.5"}, "--token-bucket-burst: \"1.5\": want a whole percentage"},
	} {
		if _, err := Parse(tc.args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
