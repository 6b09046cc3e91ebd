package settings

import (
	"io"
	"strings"
	"testing"
	"time"
)

// envOf returns a getenv over vars.
func envOf(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// egEnv is the xDS part of the env of Envoy Gateway's rate limit
// Deployment.
var egEnv = map[string]string{
	"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
	"CONFIG_GRPC_XDS_SERVER_URL":         "envoy-gateway:18001",
	"CONFIG_GRPC_XDS_NODE_ID":            "envoy-ratelimit",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS":     "true",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":    "/certs/tls.crt",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":     "/certs/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  "/certs/ca.crt",
	"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
}

// TestPeerXDSSettings: envoyproxy/ratelimit's xDS settings set Sluice's,
// under the flags and the SLUICE_* variables, in their formats.
func TestPeerXDSSettings(t *testing.T) {
	s, err := Parse(nil, envOf(egEnv), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	x := s.XDS
	if x.Server != "envoy-gateway:18001" || x.NodeID != "envoy-ratelimit" || !x.TLS || x.TLSCert != "/certs/tls.crt" ||
		x.TLSKey != "/certs/tls.key" || x.TLSCA != "/certs/ca.crt" || !s.StartWithoutConfig || x.BackoffInitial != 500*time.Millisecond {
		t.Errorf("settings from Envoy Gateway's env: %+v, start-without-config %v", x, s.StartWithoutConfig)
	}
	applied := strings.Join(s.peer.applied(), "\n")
	for _, want := range []string{"--xds-server=envoy-gateway:18001 (CONFIG_TYPE, CONFIG_GRPC_XDS_SERVER_URL)",
		"--xds-tls-ca=/certs/ca.crt (CONFIG_GRPC_XDS_SERVER_USE_TLS, CONFIG_GRPC_XDS_SERVER_TLS_CACERT)",
		"--start-without-config=true (FORCE_START_WITHOUT_INITIAL_CONFIG)"} {
		if !strings.Contains(applied, want) {
			t.Errorf("applied lacks %q:\n%s", want, applied)
		}
	}

	env := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "cluster=eg,zone=a",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "authorization:Bearer x,x-tenant:blue", "SLUICE_XDS_NODE_ID": "mine"}
	s, err = Parse([]string{"--xds-server", "flag:1"}, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.XDS.Server != "flag:1" || s.XDS.NodeID != "mine" {
		t.Errorf("a flag and a SLUICE_* variable over the peer's: server %q, node id %q", s.XDS.Server, s.XDS.NodeID)
	}
	if h, _ := pairs(s.XDS.Headers, ":"); h["authorization"] != "Bearer x" || h["x-tenant"] != "blue" {
		t.Errorf("headers %q parse to %v", s.XDS.Headers, h)
	}
	if m, _ := pairs(s.XDS.NodeMetadata, "="); m["cluster"] != "eg" || m["zone"] != "a" {
		t.Errorf("node metadata %q parses to %v", s.XDS.NodeMetadata, m)
	}
}

// TestXDSSettingsErrors: values Sluice cannot use stop the start, naming
// the flag (a peer variable's value is checked as the flag it sets).
func TestXDSSettingsErrors(t *testing.T) {
	for env, want := range map[string]string{
		"CONFIG_GRPC_XDS_NODE_METADATA=key1:val1":       `--xds-node-metadata: "key1:val1" is not key=value`,
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=a=b": `--xds-headers: "a=b" is not key:value`,
	} {
		name, v, _ := strings.Cut(env, "=")
		vars := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", name: v}
		if _, err := Parse(nil, envOf(vars), io.Discard); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %q", env, err, want)
		}
	}
	for _, args := range [][]string{{"--xds-server", "a:1", "--xds-tls-cert", "c"}, {"--xds-server", "a:1", "--xds-backoff-jitter", "2"},
		{"--xds-server", "a:1", "--xds-node-id", ""}, {"--xds-server", "a:1", "--xds-backoff-max", "1ms"}} {
		if _, err := Parse(args, envOf(nil), io.Discard); err == nil || !strings.HasPrefix(err.Error(), "--xds-") {
			t.Errorf("%q: %v, want an --xds- error", args, err)
		}
	}
}
