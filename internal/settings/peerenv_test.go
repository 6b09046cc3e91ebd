package settings

import (
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
)

// peerSettingsGo lists every envconfig name in envoyproxy/ratelimit's
// src/settings/settings.go (module version
// v1.4.1-0.20260122083618-3fb702589d36), plus PROTO, which older versions
// read, in that file's order. Names only: its code is not ours.
var peerSettingsGo = strings.Fields(`PROTO HOST PORT DEBUG_HOST DEBUG_PORT GRPC_UDS GRPC_HOST GRPC_PORT
GRPC_MAX_CONNECTION_AGE GRPC_MAX_CONNECTION_AGE_GRACE GRPC_SERVER_USE_TLS GRPC_SERVER_TLS_CERT
GRPC_SERVER_TLS_KEY GRPC_CLIENT_TLS_CACERT GRPC_CLIENT_TLS_SAN LOG_LEVEL LOG_FORMAT CONFIG_TYPE
FORCE_START_WITHOUT_INITIAL_CONFIG CONFIG_GRPC_XDS_NODE_ID CONFIG_GRPC_XDS_NODE_METADATA
CONFIG_GRPC_XDS_SERVER_URL CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL
CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS CONFIG_GRPC_XDS_SERVER_USE_TLS CONFIG_GRPC_XDS_CLIENT_TLS_CERT
CONFIG_GRPC_XDS_CLIENT_TLS_KEY CONFIG_GRPC_XDS_SERVER_TLS_CACERT CONFIG_GRPC_XDS_SERVER_TLS_SAN
XDS_CLIENT_BACKOFF_INITIAL_INTERVAL XDS_CLIENT_BACKOFF_MAX_INTERVAL XDS_CLIENT_BACKOFF_RANDOM_FACTOR
XDS_CLIENT_BACKOFF_JITTER XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES USE_DOG_STATSD USE_DOG_STATSD_MOGRIFIERS
USE_STATSD STATSD_HOST STATSD_PORT EXTRA_TAGS STATS_FLUSH_INTERVAL DISABLE_STATS USE_PROMETHEUS
PROMETHEUS_ADDR PROMETHEUS_PATH PROMETHEUS_MAPPER_YAML RUNTIME_ROOT RUNTIME_SUBDIRECTORY
RUNTIME_APPDIRECTORY RUNTIME_IGNOREDOTFILES RUNTIME_WATCH_ROOT EXPIRATION_JITTER_MAX_SECONDS
LOCAL_CACHE_SIZE_IN_BYTES NEAR_LIMIT_RATIO CACHE_KEY_PREFIX BACKEND_TYPE
STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT LIMIT_RESPONSE_HEADERS_ENABLED LIMIT_LIMIT_HEADER
LIMIT_REMAINING_HEADER LIMIT_RESET_HEADER HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED REDIS_SOCKET_TYPE
REDIS_TYPE REDIS_URL REDIS_POOL_SIZE REDIS_AUTH REDIS_TLS REDIS_TLS_CLIENT_CERT REDIS_TLS_CLIENT_KEY
REDIS_TLS_CACERT REDIS_TLS_SKIP_HOSTNAME_VERIFICATION REDIS_PIPELINE_WINDOW REDIS_PIPELINE_LIMIT
REDIS_PERSECOND REDIS_PERSECOND_SOCKET_TYPE REDIS_PERSECOND_TYPE REDIS_PERSECOND_URL
REDIS_PERSECOND_POOL_SIZE REDIS_PERSECOND_AUTH REDIS_PERSECOND_TLS REDIS_SENTINEL_AUTH
REDIS_PERSECOND_SENTINEL_AUTH REDIS_PERSECOND_PIPELINE_WINDOW REDIS_PERSECOND_PIPELINE_LIMIT
REDIS_HEALTH_CHECK_ACTIVE_CONNECTION REDIS_TIMEOUT REDIS_PERSECOND_TIMEOUT REDIS_POOL_ON_EMPTY_BEHAVIOR
REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR MEMCACHE_HOST_PORT MEMCACHE_MAX_IDLE_CONNS MEMCACHE_SRV
MEMCACHE_SRV_REFRESH MEMCACHE_TLS MEMCACHE_TLS_CLIENT_CERT MEMCACHE_TLS_CLIENT_KEY MEMCACHE_TLS_CACERT
MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION SHADOW_MODE QUOTA_MODE RESPONSE_DYNAMIC_METADATA
MERGE_DOMAIN_CONFIG TRACING_ENABLED TRACING_SERVICE_NAME TRACING_SERVICE_NAMESPACE
TRACING_SERVICE_INSTANCE_ID TRACING_EXPORTER_PROTOCOL TRACING_SAMPLING_RATE`)

// TestPeerVarsCoverSettingsGo: peerVars holds exactly the names of the
// peer's settings.go, in its order, and GRPC_SERVER_TLS_CA_CERT, which
// Envoy Gateway sets.
func TestPeerVarsCoverSettingsGo(t *testing.T) {
	var got []string
	for _, pv := range peerVars {
		if pv.name != "GRPC_SERVER_TLS_CA_CERT" {
			got = append(got, pv.name)
		}
	}
	if !slices.Equal(got, peerSettingsGo) {
		t.Errorf("peerVars names:\n%v\nwant the names of the peer's settings.go:\n%v", got, peerSettingsGo)
	}
}

// peerCases has one case per name of the peer's settings.go (the first
// variable of env): the Sluice settings it takes ("flag=value ..."), or
// "warn" (named in the start-up warning), "note" (its value is Sluice's
// behaviour already), or "error: TEXT" (the start is refused).
var peerCases = []struct{ env, want string }{
	{"PROTO=tcp", "note"},
	{"PROTO=udp", "warn"},
	{"HOST=:: PORT=9080", "http-addr=[::]:9080"},
	{"PORT=9080", "http-addr=:9080"},
	{"PORT=http", "error: PORT=\"http\""},
	{"DEBUG_HOST=127.0.0.1", "debug-addr=127.0.0.1:6070"},
	{"DEBUG_PORT=0", "debug-addr=:0"},
	{"GRPC_UDS=/run/rl.sock GRPC_PORT=9", "grpc-addr=unix:/run/rl.sock"},
	{"GRPC_HOST=::", "grpc-addr=[::]:8081"},
	{"GRPC_PORT=9081", "grpc-addr=:9081"},
	{"GRPC_MAX_CONNECTION_AGE=1h", "grpc-max-connection-age=1h"},
	{"GRPC_MAX_CONNECTION_AGE_GRACE=5m", "grpc-max-connection-age-grace=5m"},
	{"GRPC_MAX_CONNECTION_AGE=soon", "error: GRPC_MAX_CONNECTION_AGE=\"soon\""},
	{"GRPC_SERVER_USE_TLS=true GRPC_SERVER_TLS_CERT=/c/tls.crt GRPC_SERVER_TLS_KEY=/c/tls.key", "grpc-tls-cert=/c/tls.crt grpc-tls-key=/c/tls.key"},
	{"GRPC_SERVER_USE_TLS=true", "error: needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
	{"GRPC_SERVER_USE_TLS=false", "note"},
	{"GRPC_SERVER_TLS_CERT=/c/tls.crt", "warn"},
	{"GRPC_SERVER_TLS_KEY=/c/tls.key", "warn"},
	{"GRPC_CLIENT_TLS_CACERT=/c/ca.crt GRPC_SERVER_USE_TLS=true GRPC_SERVER_TLS_CERT=/c/tls.crt GRPC_SERVER_TLS_KEY=/c/tls.key",
		"grpc-client-ca=/c/ca.crt grpc-client-auth=require grpc-tls-cert=/c/tls.crt grpc-tls-key=/c/tls.key"},
	{"GRPC_CLIENT_TLS_SAN=envoy GRPC_CLIENT_TLS_CACERT=/c/ca.crt GRPC_SERVER_USE_TLS=true GRPC_SERVER_TLS_CERT=/c/tls.crt GRPC_SERVER_TLS_KEY=/c/tls.key",
		"grpc-client-san=envoy grpc-client-ca=/c/ca.crt grpc-client-auth=require grpc-tls-cert=/c/tls.crt grpc-tls-key=/c/tls.key"},
	{"GRPC_SERVER_TLS_CA_CERT=/c/ca.crt GRPC_SERVER_USE_TLS=true GRPC_SERVER_TLS_CERT=/c/tls.crt GRPC_SERVER_TLS_KEY=/c/tls.key",
		"grpc-client-ca=/c/ca.crt grpc-client-auth=if-given grpc-tls-cert=/c/tls.crt grpc-tls-key=/c/tls.key"},
	{"LOG_LEVEL=DEBUG", "log-level=debug"},
	{"LOG_LEVEL=Warning", "log-level=warn"},
	{"LOG_LEVEL=trace", "log-level=debug"},
	{"LOG_LEVEL=loud", "error: LOG_LEVEL=\"loud\""},
	{"LOG_FORMAT=text", "log-format=console"},
	{"LOG_FORMAT=JSON", "log-format=json"},
	{"CONFIG_TYPE=FILE", "note"},
	{"CONFIG_TYPE=GRPC_XDS_SOTW", "xds-server=localhost:18000 xds-node-id=default"},
	{"CONFIG_TYPE=grpc_xds_sotw CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001 CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"xds-server=envoy-gateway:18001 xds-node-id=envoy-ratelimit"},
	{"CONFIG_TYPE=REST", "error: CONFIG_TYPE=\"REST\""},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "start-without-config=true"},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG=sure", "error: FORCE_START_WITHOUT_INITIAL_CONFIG=\"sure\""},
	// Envoy Gateway's xDS settings.
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS=true CONFIG_TYPE=GRPC_XDS_SOTW CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/c/tls.crt CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/c/tls.key " +
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/c/ca.crt CONFIG_GRPC_XDS_SERVER_TLS_SAN=eg",
		"xds-server=localhost:18000 xds-node-id=default xds-tls=true xds-tls-cert=/c/tls.crt xds-tls-key=/c/tls.key xds-tls-ca=/c/ca.crt xds-tls-server-name=eg"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/c/tls.crt CONFIG_TYPE=GRPC_XDS_SOTW", "warn"}, // without CONFIG_GRPC_XDS_SERVER_USE_TLS
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS=maybe CONFIG_TYPE=GRPC_XDS_SOTW", "error: CONFIG_GRPC_XDS_SERVER_USE_TLS=\"maybe\""},
	{"CONFIG_GRPC_XDS_NODE_METADATA=a=b CONFIG_TYPE=GRPC_XDS_SOTW", "xds-server=localhost:18000 xds-node-id=default xds-node-metadata=a=b"},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=x-a:b CONFIG_TYPE=GRPC_XDS_SOTW", "xds-server=localhost:18000 xds-node-id=default xds-headers=x-a:b"},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=1s CONFIG_TYPE=GRPC_XDS_SOTW", "warn"},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=1s XDS_CLIENT_BACKOFF_MAX_INTERVAL=1m CONFIG_TYPE=GRPC_XDS_SOTW",
		"xds-server=localhost:18000 xds-node-id=default xds-backoff-initial=1s xds-backoff-max=1m"},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=10 CONFIG_TYPE=GRPC_XDS_SOTW", "error: XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=\"10\""},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR=0.2 CONFIG_TYPE=GRPC_XDS_SOTW", "xds-server=localhost:18000 xds-node-id=default xds-backoff-jitter=0.2"},
	{"XDS_CLIENT_BACKOFF_JITTER=false CONFIG_TYPE=GRPC_XDS_SOTW", "xds-server=localhost:18000 xds-node-id=default xds-backoff-jitter=0"},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=8388608 CONFIG_TYPE=GRPC_XDS_SOTW", "xds-server=localhost:18000 xds-node-id=default xds-max-msg-bytes=8388608"},
	// With CONFIG_TYPE=FILE (the default) the peer reads none of them.
	{"CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit", "warn"},
	{"CONFIG_GRPC_XDS_NODE_METADATA=a:b", "warn"},
	{"CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001", "warn"},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=1s", "warn"},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=authorization:secret", "warn"},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "warn"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/c/tls.crt", "warn"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/c/tls.key", "warn"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/c/ca.crt", "warn"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN=eg", "warn"},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=1s", "warn"},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL=1m", "warn"},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR=0.2", "warn"},
	{"XDS_CLIENT_BACKOFF_JITTER=false", "warn"},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=1000", "warn"},
	{"USE_DOG_STATSD=true", "warn"},
	{"USE_DOG_STATSD=false", "note"},
	{"USE_DOG_STATSD_MOGRIFIERS=A", "warn"},
	{"USE_STATSD=true", "warn"},
	{"USE_STATSD=false", "note"},
	{"STATSD_HOST=statsd", "warn"},
	{"STATSD_PORT=9125", "warn"},
	{"EXTRA_TAGS=a:b", "warn"},
	{"STATS_FLUSH_INTERVAL=1s", "warn"},
	{"DISABLE_STATS=true", "warn"},
	{"USE_PROMETHEUS=true PROMETHEUS_ADDR=:19001", "compat-metrics=true metrics-addr=:19001 metrics-path=/metrics"},
	{"USE_PROMETHEUS=true", "compat-metrics=true metrics-addr=:9090 metrics-path=/metrics"},
	{"PROMETHEUS_ADDR=:19001", "warn"},
	{"PROMETHEUS_PATH=/m USE_PROMETHEUS=true", "compat-metrics=true metrics-addr=:9090 metrics-path=/m"},
	{"PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml", "warn"},
	{"RUNTIME_ROOT=/data RUNTIME_SUBDIRECTORY=ratelimit", "config=/data/ratelimit/config config-tree=true config-dotfiles=true"},
	{"RUNTIME_SUBDIRECTORY=rl", "config=/srv/runtime_data/current/rl/config config-tree=true config-dotfiles=true"},
	{"RUNTIME_APPDIRECTORY=limits RUNTIME_ROOT=/d", "config=/d/limits config-tree=true config-dotfiles=true"},
	{"RUNTIME_IGNOREDOTFILES=true RUNTIME_ROOT=/data RUNTIME_SUBDIRECTORY=ratelimit", "config=/data/ratelimit/config config-tree=true config-dotfiles=false"},
	{"RUNTIME_IGNOREDOTFILES=true", "warn"},
	{"RUNTIME_WATCH_ROOT=false RUNTIME_ROOT=/data RUNTIME_SUBDIRECTORY=ratelimit", "config=/data/ratelimit/config config-tree=true config-dotfiles=true"},
	{"EXPIRATION_JITTER_MAX_SECONDS=60", "warn"},
	{"LOCAL_CACHE_SIZE_IN_BYTES=1048576", "over-limit-cache=true"},
	{"LOCAL_CACHE_SIZE_IN_BYTES=0", "over-limit-cache=false"},
	{"NEAR_LIMIT_RATIO=0.9", "near-limit-ratio=0.9"},
	{"CACHE_KEY_PREFIX=rl_", "redis-prefix=rl_"},
	{"BACKEND_TYPE=redis", "redis-url=unix:///var/run/nutcracker/ratelimit.sock"},
	{"BACKEND_TYPE=memcache", "error: BACKEND_TYPE=memcache: Sluice keeps its counters in Redis"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true", "count-denied=false"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false", "count-denied=true"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=maybe", "error: STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=\"maybe\""},
	{"LIMIT_RESPONSE_HEADERS_ENABLED=true", "response-headers=compat compat-header-names=RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset"},
	{"LIMIT_RESPONSE_HEADERS_ENABLED=false", "response-headers=none"},
	{"LIMIT_LIMIT_HEADER=X-Limit LIMIT_RESPONSE_HEADERS_ENABLED=true", "response-headers=compat compat-header-names=X-Limit,RateLimit-Remaining,RateLimit-Reset"},
	{"LIMIT_REMAINING_HEADER=X-Left LIMIT_RESPONSE_HEADERS_ENABLED=true", "response-headers=compat compat-header-names=RateLimit-Limit,X-Left,RateLimit-Reset"},
	{"LIMIT_RESET_HEADER=X-Reset", "warn"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true", "healthcheck-requires=config"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=false", "healthcheck-requires=none"},
	{"REDIS_SOCKET_TYPE=tcp REDIS_URL=redis:6379", "redis-url=redis://redis:6379"},
	{"REDIS_SOCKET_TYPE=tcp", "error: REDIS_SOCKET_TYPE=tcp with REDIS_URL unset"},
	{"REDIS_TYPE=SENTINEL REDIS_URL=mymaster,s1:26379,s2:26379 REDIS_SOCKET_TYPE=tcp", "redis-sentinel-master=mymaster redis-sentinel-addrs=s1:26379,s2:26379"},
	{"REDIS_TYPE=cluster REDIS_URL=n1:7000,n2:7001 REDIS_SOCKET_TYPE=tcp", "redis-cluster-addrs=n1:7000,n2:7001"},
	{"REDIS_TYPE=sentinel REDIS_URL=s1:26379", "error: want the master name and the sentinels"},
	{"REDIS_TYPE=ring REDIS_URL=r:1", "error: REDIS_TYPE=\"ring\""},
	{"REDIS_URL=/var/run/redis.sock", "redis-url=unix:///var/run/redis.sock"},
	{"REDIS_URL=127.0.0.1:6390 RUNTIME_ROOT=/data USE_STATSD=false", "redis-url=redis://127.0.0.1:6390 config=/data/config config-tree=true config-dotfiles=true"},
	{"REDIS_URL=h:6379 REDIS_SOCKET_TYPE=unix", "error: a unix socket is a path"},
	{"REDIS_URL=redis://u:p@h:6380/2 REDIS_SOCKET_TYPE=tcp", "redis-url=redis://u:p@h:6380/2"},
	{"REDIS_POOL_SIZE=20", "redis-pool-size=20"},
	{"REDIS_AUTH=s3cret REDIS_URL=h:6379 REDIS_SOCKET_TYPE=tcp", "redis-url=redis://:s3cret@h:6379"},
	{"REDIS_TLS=true REDIS_AUTH=user:s3cret REDIS_URL=h:6380 REDIS_SOCKET_TYPE=tcp", "redis-url=rediss://user:s3cret@h:6380"},
	{"REDIS_TLS_CLIENT_CERT=/c/r.crt REDIS_TLS=true REDIS_URL=h:1 REDIS_SOCKET_TYPE=tcp", "redis-tls-cert=/c/r.crt redis-url=rediss://h:1"},
	{"REDIS_TLS_CLIENT_KEY=/c/r.key REDIS_TLS=true REDIS_URL=h:1 REDIS_SOCKET_TYPE=tcp", "redis-tls-key=/c/r.key redis-url=rediss://h:1"},
	{"REDIS_TLS_CACERT=/c/ca.crt REDIS_TLS=true REDIS_URL=h:1 REDIS_SOCKET_TYPE=tcp", "redis-tls-ca=/c/ca.crt redis-url=rediss://h:1"},
	{"REDIS_TLS_CACERT=/c/ca.crt", "warn"},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true REDIS_TLS=true REDIS_URL=h:1 REDIS_SOCKET_TYPE=tcp", "redis-tls-skip-hostname-verification=true redis-url=rediss://h:1"},
	{"REDIS_PIPELINE_WINDOW=150us", "warn"},
	{"REDIS_PIPELINE_WINDOW=0", "note"},
	{"REDIS_PIPELINE_LIMIT=8", "warn"},
	{"REDIS_PERSECOND=true", "warn"},
	{"REDIS_PERSECOND=false", "note"},
	{"REDIS_PERSECOND_SOCKET_TYPE=tcp", "warn"},
	{"REDIS_PERSECOND_TYPE=cluster", "warn"},
	{"REDIS_PERSECOND_URL=r:6379", "warn"},
	{"REDIS_PERSECOND_POOL_SIZE=5", "warn"},
	{"REDIS_PERSECOND_AUTH=pw", "warn"},
	{"REDIS_PERSECOND_TLS=true", "warn"},
	{"REDIS_SENTINEL_AUTH=pw REDIS_TYPE=sentinel REDIS_URL=m,s:1 REDIS_SOCKET_TYPE=tcp", "redis-sentinel-auth=pw redis-sentinel-master=m redis-sentinel-addrs=s:1"},
	{"REDIS_SENTINEL_AUTH=pw", "warn"},
	{"REDIS_PERSECOND_SENTINEL_AUTH=pw", "warn"},
	{"REDIS_PERSECOND_PIPELINE_WINDOW=1ms", "warn"},
	{"REDIS_PERSECOND_PIPELINE_LIMIT=2", "warn"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true", "healthcheck-requires=config,store"},
	{"REDIS_TIMEOUT=2s", "redis-dial-timeout=2s redis-read-timeout=2s redis-write-timeout=2s"},
	{"REDIS_PERSECOND_TIMEOUT=2s", "warn"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR=wait", "note"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR=ERROR", "warn"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR=WAIT", "warn"},
	{"MEMCACHE_HOST_PORT=m:11211", "warn"},
	{"MEMCACHE_HOST_PORT=m:11211 BACKEND_TYPE=memcache", "error: BACKEND_TYPE=memcache"},
	{"MEMCACHE_MAX_IDLE_CONNS=4", "warn"},
	{"MEMCACHE_SRV=_memcache._tcp.example", "warn"},
	{"MEMCACHE_SRV_REFRESH=1m", "warn"},
	{"MEMCACHE_TLS=true", "warn"},
	{"MEMCACHE_TLS_CLIENT_CERT=/c/m.crt", "warn"},
	{"MEMCACHE_TLS_CLIENT_KEY=/c/m.key", "warn"},
	{"MEMCACHE_TLS_CACERT=/c/ca.crt", "warn"},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION=true", "warn"},
	{"SHADOW_MODE=true", "shadow-mode=true"},
	{"QUOTA_MODE=true", "warn"},
	{"QUOTA_MODE=false", "note"},
	{"RESPONSE_DYNAMIC_METADATA=true", "dynamic-metadata=true"},
	{"MERGE_DOMAIN_CONFIG=true", "warn"},
	{"TRACING_ENABLED=true", "tracing-enabled=true"},
	{"TRACING_SERVICE_NAME=rl", "tracing-service-name=rl"},
	{"TRACING_SERVICE_NAMESPACE=ns", "tracing-service-namespace=ns"},
	{"TRACING_SERVICE_INSTANCE_ID=i", "tracing-service-instance-id=i"},
	{"TRACING_EXPORTER_PROTOCOL=grpc", "tracing-exporter-protocol=grpc"},
	{"TRACING_SAMPLING_RATE=0.1", "tracing-sampling-rate=0.1"},
}

// TestPeerEnv is the table over every name of the peer's settings.go: each
// set variable is honoured (the Sluice settings and the values it takes),
// or named in the start-up warning, or refuses the start with an error
// naming it.
func TestPeerEnv(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range peerCases {
		env := map[string]string{}
		first := ""
		for _, kv := range strings.Fields(tc.env) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
			if first == "" {
				first = k
			}
		}
		covered[first] = true
		p, err := readPeerEnv(func(k string) string { return env[k] })
		if err == nil {
			err = p.redisErr // stops the start unless a flag gives the address
		}
		switch {
		case strings.HasPrefix(tc.want, "error: "):
			if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(tc.want, "error: ")) {
				t.Errorf("%s: error %v, want one containing %q", tc.env, err, strings.TrimPrefix(tc.want, "error: "))
			}
			continue
		case err != nil:
			t.Errorf("%s: %v", tc.env, err)
			continue
		}
		warned := slices.ContainsFunc(p.warnings, func(w string) bool { return strings.HasPrefix(w, first+"=") })
		noted := slices.ContainsFunc(p.noted, func(w string) bool { return strings.HasPrefix(w, first+"=") })
		switch tc.want {
		case "warn":
			if !warned {
				t.Errorf("%s: not in the warning %q", tc.env, p.warnings)
			}
		case "note":
			if !noted || warned || len(p.vals) > 0 {
				t.Errorf("%s: notes %q, warnings %q, settings %v: want only a note", tc.env, p.noted, p.warnings, p.vals)
			}
		default:
			want := map[string]string{}
			for _, kv := range strings.Fields(tc.want) {
				k, v, _ := strings.Cut(kv, "=")
				want[k] = v
			}
			for k, v := range want {
				if p.vals[k] != v {
					t.Errorf("%s: --%s = %q, want %q", tc.env, k, p.vals[k], v)
				}
			}
			for k := range p.vals {
				if _, ok := want[k]; !ok {
					t.Errorf("%s: sets --%s=%q too", tc.env, k, p.vals[k])
				}
			}
			if warned {
				t.Errorf("%s: honoured and warned: %q", tc.env, p.warnings)
			}
			// A variable that decides no value (RUNTIME_WATCH_ROOT) is
			// noted instead: a setting credits only what decided it.
			if !noted && !slices.ContainsFunc(keys(p.from), func(f string) bool { return slices.Contains(p.from[f], first) }) {
				t.Errorf("%s: no setting names %s as its source (%v)", tc.env, first, p.from)
			}
		}
	}
	for _, pv := range peerVars {
		if !covered[pv.name] {
			t.Errorf("no case sets %s first", pv.name)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestPeerPrecedence: a flag wins over SLUICE_*, which wins over the peer's
// name, which wins over the default; the peer's value that lost is said so.
func TestPeerPrecedence(t *testing.T) {
	env := map[string]string{"REDIS_URL": "peer:6379", "REDIS_SOCKET_TYPE": "tcp", "PORT": "9080", "SLUICE_HTTP_ADDR": ":7080",
		"LOG_LEVEL": "DEBUG", "NEAR_LIMIT_RATIO": "0.5"}
	s, err := Parse([]string{"--near-limit-ratio", "0.7"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.RedisURL != "redis://peer:6379" || s.HTTPAddr != ":7080" || s.LogLevel != "debug" || s.NearLimitRatio != "0.7" || s.GRPCAddr != ":8081" {
		t.Errorf("redis %q http %q log %q ratio %q grpc %q, want redis://peer:6379 :7080 debug 0.7 :8081", s.RedisURL, s.HTTPAddr, s.LogLevel, s.NearLimitRatio, s.GRPCAddr)
	}
	applied := strings.Join(s.peer.applied(), "\n")
	for _, want := range []string{"PORT: overridden by SLUICE_HTTP_ADDR", "NEAR_LIMIT_RATIO: overridden by --near-limit-ratio", "--redis-url=redis://peer:6379 (REDIS_SOCKET_TYPE, REDIS_URL)"} {
		if !strings.Contains(applied, want) {
			t.Errorf("applied lacks %q:\n%s", want, applied)
		}
	}
}

// TestPeerSecretsNotShown: passwords never reach the start-up lines.
func TestPeerSecretsNotShown(t *testing.T) {
	env := map[string]string{"REDIS_URL": "h:6379", "REDIS_SOCKET_TYPE": "tcp", "REDIS_AUTH": "s3cret", "REDIS_PERSECOND_AUTH": "s3cret",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "authorization:s3cret", "REDIS_SENTINEL_AUTH": "s3cret"}
	p, err := readPeerEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(append(p.applied(), p.warnings...), "\n"); strings.Contains(all, "s3cret") {
		t.Errorf("a secret is shown:\n%s", all)
	}
}

// TestPeerBadValue: a value the peer would not parse names its variable.
func TestPeerBadValue(t *testing.T) {
	env := map[string]string{"REDIS_POOL_SIZE": "many"}
	_, err := Parse(nil, func(k string) string { return env[k] }, io.Discard)
	if err == nil || err.Error() != `REDIS_POOL_SIZE="many" (envoyproxy/ratelimit's setting): want a whole number` {
		t.Errorf("error %v", err)
	}
}

// TestMigratingTable keeps docs/MIGRATING.md's table equal to peerVars.
func TestMigratingTable(t *testing.T) {
	doc, err := readFile("../../docs/MIGRATING.md")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writePeerTable(&b)
	if !strings.Contains(doc, b.String()) {
		t.Errorf("docs/MIGRATING.md does not hold the table of envoyproxy/ratelimit's settings; paste this:\n%s", b.String())
	}
}

// TestPeerDefaultsApply: with any of the peer's settings, the peer's
// defaults that change an outcome apply (every hit counts, no response
// headers, Redis at its default socket) and the start-up line says so; a
// flag or SLUICE_* variable still wins, and the line says what is in
// force; without the peer's settings Sluice's own defaults stay.
func TestPeerDefaultsApply(t *testing.T) {
	peer := map[string]string{"LOG_LEVEL": "info", "USE_STATSD": "false"}
	with := func(extra ...string) map[string]string {
		env := maps.Clone(peer)
		for _, kv := range extra {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		return env
	}
	const peerLine = "--count-denied=true (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset: a request is over the limit when the count after " +
		"its hits passes the limit, and its hits count either way (envoyproxy/ratelimit's default))"
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string
		counting string // Settings.Counting's mode
		headers  string
		redis    string
		line     string
	}{
		{"Sluice's own", map[string]string{}, nil, "all-or-nothing", "draft", "", ""},
		{"tracing names alone", map[string]string{"TRACING_ENABLED": "false"}, nil, "all-or-nothing", "draft", "", ""},
		{"peer", peer, nil, "count-denied", "none", "unix:///var/run/nutcracker/ratelimit.sock", peerLine},
		{"peer, stop increment", with("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"), nil, "all-or-nothing", "none", "unix:///var/run/nutcracker/ratelimit.sock",
			"--count-denied=false (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)"},
		{"peer, SLUICE_COUNT_DENIED wins", with("SLUICE_COUNT_DENIED=false"), nil, "all-or-nothing", "none", "unix:///var/run/nutcracker/ratelimit.sock",
			"overridden by SLUICE_COUNT_DENIED (--count-denied=false in force)"},
		{"peer, flag wins", with("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false"), []string{"--count-denied=false"}, "all-or-nothing", "none",
			"unix:///var/run/nutcracker/ratelimit.sock",
			"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: overridden by --count-denied (--count-denied=false in force)"},
		{"peer, --overdraw wins where it applies", peer, []string{"--overdraw"}, "overdraw", "none", "unix:///var/run/nutcracker/ratelimit.sock", peerLine},
		{"peer headers", with("LIMIT_RESPONSE_HEADERS_ENABLED=true"), nil, "count-denied", "compat", "unix:///var/run/nutcracker/ratelimit.sock",
			"--response-headers=compat (LIMIT_RESPONSE_HEADERS_ENABLED)"},
		{"peer, headers flag wins", peer, []string{"--response-headers", "draft"}, "count-denied", "draft", "unix:///var/run/nutcracker/ratelimit.sock",
			"LIMIT_RESPONSE_HEADERS_ENABLED unset: no rate limit headers (envoyproxy/ratelimit's default): overridden by --response-headers (--response-headers=draft in force)"},
		{"peer, Redis given", with("REDIS_URL=r:6379"), nil, "count-denied", "none", "redis://r:6379", "--redis-url=redis://r:6379 (REDIS_URL)"},
		{"peer, BACKEND_TYPE alone", map[string]string{"BACKEND_TYPE": "redis"}, nil, "count-denied", "none", "unix:///var/run/nutcracker/ratelimit.sock", ""},
		{"peer, cluster by flag", peer, []string{"--redis-cluster-addrs", "n1:7000"}, "count-denied", "none", "", ""},
	} {
		s, err := Parse(tc.args, envOf(tc.env), io.Discard)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if mode, _ := s.Counting(); mode != tc.counting || s.ResponseHeaders != tc.headers || s.RedisURL != tc.redis {
			t.Errorf("%s: counting %s, response headers %q, redis %q; want %s, %q, %q", tc.name, mode, s.ResponseHeaders, s.RedisURL,
				tc.counting, tc.headers, tc.redis)
		}
		if applied := strings.Join(s.peer.applied(), "\n"); !strings.Contains(applied, tc.line) {
			t.Errorf("%s: the start-up line lacks %q:\n%s", tc.name, tc.line, applied)
		}
	}
}

// TestPeerRedisRefused: a Redis setting of the peer's that names no Redis
// Sluice can use stops the start with one line naming it, never falling
// back to the in-memory store.
func TestPeerRedisRefused(t *testing.T) {
	for _, tc := range []struct {
		env   map[string]string
		empty []string
		want  string
	}{
		{map[string]string{"REDIS_TYPE": "cluster"}, nil, `REDIS_URL="" with REDIS_TYPE=cluster (envoyproxy/ratelimit's settings): want the cluster's nodes`},
		{map[string]string{"REDIS_TYPE": "cluster"}, []string{"REDIS_URL"}, `REDIS_URL="" with REDIS_TYPE=cluster`},
		{map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": " , ,"}, nil, `REDIS_URL=", ," with REDIS_TYPE=cluster`},
		{map[string]string{"REDIS_TYPE": "sentinel"}, nil, `REDIS_URL="/var/run/nutcracker/ratelimit.sock" with REDIS_TYPE=sentinel`},
		{map[string]string{}, []string{"REDIS_URL"}, `REDIS_URL="" (envoyproxy/ratelimit's setting): set but empty, it names no Redis`},
		{map[string]string{"BACKEND_TYPE": "redis"}, []string{"REDIS_URL"}, `REDIS_URL="" (envoyproxy/ratelimit's setting): set but empty`},
		{map[string]string{"REDIS_URL": "a:1,b:2", "REDIS_SOCKET_TYPE": "tcp"}, nil, `REDIS_URL="a:1,b:2" with REDIS_TYPE=single`},
		{map[string]string{"LOG_LEVEL": "info", "REDIS_SOCKET_TYPE": "tcp"}, nil, "REDIS_SOCKET_TYPE=tcp with REDIS_URL unset"},
		// Blanks are no address either: not the peer's default socket.
		{map[string]string{"REDIS_URL": " "}, nil, `REDIS_URL=" " (envoyproxy/ratelimit's setting): set but empty, it names no Redis`},
		{map[string]string{"REDIS_URL": "\t", "LOG_LEVEL": "info"}, nil, `REDIS_URL="\t" (envoyproxy/ratelimit's setting): set but empty`},
	} {
		_, err := Parse(nil, envOf(tc.env), io.Discard, tc.empty...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v (empty: %v): error %v, want one line starting %q", tc.env, tc.empty, err, tc.want)
		}
	}
	if got := EmptyEnv([]string{"REDIS_URL=", "A=b", "PATH=/bin", "X=y=z"}); !slices.Equal(got, []string{"REDIS_URL"}) {
		t.Errorf("EmptyEnv = %q, want [REDIS_URL]", got)
	}
}

// TestPeerRedisFlagWins: a Redis address given by flag or SLUICE_*
// decides the URL, so the peer's Redis settings that name no address of
// their own (REDIS_SOCKET_TYPE=tcp with REDIS_URL unset, a blank REDIS_URL)
// do not stop the start; the report says the flag won.
func TestPeerRedisFlagWins(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string // RedisURL or, with cluster, RedisCluster
	}{
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "LOG_LEVEL": "info"}, []string{"--redis-url", "redis://r:6379"}, "redis://r:6379"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "SLUICE_REDIS_URL": "redis://s:6379"}, nil, "redis://s:6379"},
		{map[string]string{"REDIS_URL": " "}, []string{"--redis-url", "redis://r:6379"}, "redis://r:6379"},
		{map[string]string{"REDIS_TYPE": "cluster"}, []string{"--redis-cluster-addrs", "c1:7000,c2:7000"}, "cluster c1:7000,c2:7000"},
	} {
		s, err := Parse(tc.args, envOf(tc.env), io.Discard)
		if err != nil {
			t.Errorf("%v %v: %v", tc.env, tc.args, err)
			continue
		}
		got := s.RedisURL
		if strings.HasPrefix(tc.want, "cluster ") {
			got = "cluster " + s.RedisCluster
		}
		if got != tc.want {
			t.Errorf("%v %v: %q, want %q", tc.env, tc.args, got, tc.want)
		}
		if w := s.Report().PeerWarnings; !slices.ContainsFunc(w, func(l string) bool {
			return strings.HasSuffix(l, "; not used: a flag or SLUICE_* variable gives the Redis address")
		}) {
			t.Errorf("%v %v: warnings %q do not say the peer's Redis settings went unused", tc.env, tc.args, w)
		}
	}
}

// TestDebugAddrDefault: Sluice's debug listener is on loopback unless
// DEBUG_HOST/DEBUG_PORT (the peer's host default: every address) or a flag
// say otherwise.
func TestDebugAddrDefault(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, "127.0.0.1:6070"},
		{map[string]string{"LOG_LEVEL": "info", "REDIS_URL": "r:1"}, "127.0.0.1:6070"},
		// Istio's sample: its Service's 6070 does not reach the pod's
		// loopback, as docs/MIGRATING.md says.
		{istioEnv, "127.0.0.1:6070"},
		{map[string]string{"DEBUG_PORT": "6071"}, ":6071"},
		{map[string]string{"DEBUG_HOST": "0.0.0.0"}, "0.0.0.0:6070"},
	} {
		s, err := Parse(nil, envOf(tc.env), io.Discard)
		if err != nil || s.DebugAddr != tc.want {
			t.Errorf("%v: debug addr %q (%v), want %q", tc.env, s.DebugAddr, err, tc.want)
		}
	}
}
