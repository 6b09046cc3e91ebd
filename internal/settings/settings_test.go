package settings

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestUnknownEnv: a misspelt SLUICE_* variable is named with the setting it
// probably meant.
func TestUnknownEnv(t *testing.T) {
	got := UnknownEnv([]string{"SLUICE_LOGLEVEL=debug", "SLUICE_REDIS_URL=redis://x", "SLUICE_REDIS_ULR=x", "SLUICE_WHATEVER_THIS_IS=1", "PATH=/bin"})
	want := []string{
		"SLUICE_LOGLEVEL is not a Sluice setting (ignored); did you mean SLUICE_LOG_LEVEL?",
		"SLUICE_REDIS_ULR is not a Sluice setting (ignored); did you mean SLUICE_REDIS_URL?",
		"SLUICE_WHATEVER_THIS_IS is not a Sluice setting (ignored)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("unknownEnv =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSettingsCaseInsensitive: words in flags and SLUICE_* values are
// case-insensitive, as envoyproxy/ratelimit's are.
func TestSettingsCaseInsensitive(t *testing.T) {
	env := map[string]string{"SLUICE_LOG_LEVEL": "INFO", "SLUICE_FAILURE_MODE": "Allow", "SLUICE_RESPONSE_HEADERS": "DRAFT,Compat", "SLUICE_RAW_BODY": "TRUE"}
	s, err := Parse([]string{"--log-format", "JSON"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.LogLevel != "info" || s.FailureMode != "allow" || s.ResponseHeaders != "draft,compat" || !s.RawBody || s.LogFormat != "json" {
		t.Errorf("settings %q %q %q %v %q", s.LogLevel, s.FailureMode, s.ResponseHeaders, s.RawBody, s.LogFormat)
	}
}

func TestSettings(t *testing.T) {
	env := map[string]string{"SLUICE_GRPC_ADDR": ":9000", "SLUICE_RESPONSE_HEADERS": "compat", "SLUICE_STORE_TIMEOUT": "5ms", "SLUICE_VERSION": "1.2.3"}
	getenv := func(k string) string { return env[k] }
	s, err := Parse([]string{"--grpc-addr", ":9001"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.GRPCAddr != ":9001" || s.HTTPAddr != ":8080" || s.ResponseHeaders != "compat" || s.StoreTimeout != 5*time.Millisecond || s.Config != "config" || s.Version {
		t.Errorf("settings = %+v", s)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--response-headers", "ietf"}, nil, `--response-headers: unknown response header set "ietf" (want draft, compat, draft,compat or none)`},
		{[]string{"--log-level", "loud"}, nil, `--log-level: unknown level "loud" (want debug, info, warn or error)`},
		{[]string{"--failure-mode", "maybe"}, nil, `--failure-mode: unknown mode "maybe" (want error, allow, deny or local)`},
		{[]string{"--max-descriptors", "0"}, nil, `--max-descriptors: 0 must be at least 1`},
		{[]string{"--rlqs-assignment-ttl", "1500ms"}, nil, `--rlqs-assignment-ttl: 1.5s: want whole seconds, at least 1s (Envoy reads only the seconds)`},
		{[]string{"--rlqs-idle", "5s"}, nil, `--rlqs-idle: 5s is shorter than --rlqs-assignment-ttl (10s): a bucket forgotten earlier gives its share to others while its Envoy still spends its assignment`},
		{[]string{"--rlqs-idle", "2s", "--rlqs-assignment-ttl", "3s"}, nil, `--rlqs-idle: 2s is shorter than --rlqs-assignment-ttl (3s): a bucket forgotten earlier gives its share to others while its Envoy still spends its assignment`},
		{[]string{"--rlqs-unmatched", "maybe"}, nil, `--rlqs-unmatched: unknown "maybe" (want allow or deny)`},
		{[]string{"--rlqs-max-buckets", "0"}, nil, `--rlqs-max-buckets: 0 must be at least 1`},
		{[]string{"--rlqs-max-total-buckets", "0"}, nil, `--rlqs-max-total-buckets: 0 must be at least 1`},
		{[]string{"--rlqs-max-streams", "-1"}, nil, `--rlqs-max-streams: -1 must be at least 1`},
		{nil, map[string]string{"SLUICE_RLQS_MAX_STREAMS_PER_CONNECTION": "0"}, `--rlqs-max-streams-per-connection: 0 must be at least 1`},
		{[]string{"--redis-pool-size", "99999999999"}, nil, `--redis-pool-size: 99999999999 must be 0 (the default) to 10000`},
		{nil, map[string]string{"SLUICE_REDIS_POOL_SIZE": "3000000000"}, `--redis-pool-size: 3000000000 must be 0 (the default) to 10000`},
		{[]string{"--redis-pool-size", "1", "--redis-calls-in-flight", "4"}, nil, `--redis-pool-size: 1 must be more than --redis-calls-in-flight (4): the rest serve refunds, lease give-backs and probes`},
		{[]string{"--redis-calls-in-flight", "0"}, nil, `--redis-calls-in-flight: 0 must be 1 to 10000`},
		{[]string{"--redis-lease-rate", "-1"}, nil, `--redis-lease-rate: -1 must be 0 (off) or more`},
		{[]string{"--redis-lease-span", "1h"}, nil, `--redis-lease-span: 1h0m0s must be positive and at most 1s`},
		{nil, map[string]string{"SLUICE_STORE_TIMEOUT": "soon"}, `SLUICE_STORE_TIMEOUT="soon": want a duration such as 15ms or 2s`},
		{[]string{"serve"}, nil, `unexpected argument "serve" (did you mean 'sluice check serve'?)`},
		{[]string{"--store-timeout", "fast"}, nil, `invalid value "fast" for flag -store-timeout: parse error (sluice --help lists the flags)`},
	} {
		_, err := Parse(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%v, %v) error = %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}

// TestReadmeSettingsTable keeps the settings table of docs/configuration.md equal to the
// flags the binary has.
func TestReadmeSettingsTable(t *testing.T) {
	readme, err := readFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writeTable(&b)
	if !strings.Contains(readme, b.String()) {
		t.Errorf("docs/configuration.md does not hold the settings table; paste this:\n%s", b.String())
	}
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

func TestTLSSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-tls-cert", "x.pem"}, "--grpc-tls-cert and --grpc-tls-key: set both or neither"},
		{[]string{"--grpc-client-ca", "ca.pem"}, "--grpc-client-ca: mTLS needs --grpc-tls-cert and --grpc-tls-key"},
	} {
		_, err := Parse(tc.args, func(string) string { return "" }, nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%v) = %v, want %q", tc.args, err, tc.want)
		}
	}
}
