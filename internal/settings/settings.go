package settings

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/ratelimit"
	"github.com/sluicehq/sluice/pkg/redis"
	"github.com/sluicehq/sluice/pkg/rls"
)

// Settings are the server's flags, each with an environment twin
// (SLUICE_ + the flag name in upper case with '-' as '_'). A flag given on the
// command line wins over its environment variable, which wins over the
// setting envoyproxy/ratelimit reads for it (peerenv.go), which wins over
// the default. Parse returns them validated; the methods return the parsed
// forms of the fields that hold text.
type Settings struct {
	Config          string
	ConfigTree      bool
	ConfigDotfiles  bool
	GRPCAddr        string
	GRPCMaxAge      time.Duration
	GRPCMaxAgeGrace time.Duration
	GRPCClientAuth  string
	GRPCClientSAN   string
	HTTPAddr        string
	DebugAddr       string
	MetricsAddr     string
	MetricsPath     string
	CompatMetrics   bool
	Healthcheck     string
	ShadowMode      bool
	Overdraw        bool
	CountDenied     bool
	CompatNames     string
	RedisTLSCert    string
	RedisTLSKey     string
	RedisTLSNoHost  bool
	RedisSentAuth   string
	HTTPReadTimeout time.Duration
	// JSONHitsAddend is --json-hits-addend: POST /json may refund and add
	// more than one hit (rls.Options.JSONHitsAddend).
	JSONHitsAddend bool
	// JSON is --json: POST /json counts (as gRPC), only checks, or is off.
	JSON string
	// ConfigMaxBytes is --config-max-bytes: the largest config file read
	// (descriptors.Selection.MaxFileBytes).
	ConfigMaxBytes  int
	RedisURL        string
	RedisSentinel   string
	RedisSentinels  string
	RedisCluster    string
	RedisPoolSize   int
	RedisInFlight   int
	RedisMaxFlight  int
	RedisLeaseRate  int
	RedisLeaseSpan  time.Duration
	RedisDial       time.Duration
	RedisRead       time.Duration
	RedisWrite      time.Duration
	RedisPrefix     string
	RedisTLSCA      string
	GRPCTLSCert     string
	GRPCTLSKey      string
	GRPCClientCA    string
	MaxRequestBytes int
	OverLimitCache  bool
	ReloadDebounce  time.Duration
	HealthInterval  time.Duration
	NearLimitRatio  string
	LogLevel        string
	LogFormat       string
	ResponseHeaders string
	RawBody         bool
	DynamicMetadata bool
	FailureMode     string
	// Cache and CacheSync are --cache, the limiter cache of the limits
	// whose rate_limit and domain set none, and --cache-sync, its period;
	// LocalInstances is --local-instances, the instances a failure_mode
	// local divides by (0: the live count last seen).
	Cache          bool
	CacheSync      time.Duration
	LocalInstances int
	// Algorithm, SubWindows and TokenBucketBurst are --algorithm,
	// --sub-windows and --token-bucket-burst: the defaults of the limits
	// that set none (Defaults); Overlay is --overlay, the policy overlay's
	// file or directory ("" for none).
	Algorithm        string
	SubWindows       int
	TokenBucketBurst string
	Overlay          string
	StoreTimeout     time.Duration
	ShutdownDelay    time.Duration
	ShutdownTimeout  time.Duration
	MaxCounters      int
	MaxDescriptors   int
	MaxEntries       int
	MaxKeyBytes      int
	Version          bool
	ReadyNeedsStore  bool
	// StartWithoutConfig and XDS are the config source's settings
	// (xds.go).
	StartWithoutConfig bool
	XDS                XDSSettings
	UISettings         // ui.go
	TracingSettings    // tracing.go
	// RLQS are the rate limit quota service's settings (rlqs.go).
	RLQS RLQSSettings
	// Tenants are the tenant tables' settings (tenants.go).
	Tenants TenantSettings

	headers rls.HeaderSet // parsed ResponseHeaders
	// healthNeeds* are the parsed Healthcheck.
	healthNeedsConfig, healthNeedsStore bool
	// peer is what envoyproxy/ratelimit's variables set, and given what
	// the flags and SLUICE_* variables set, for the report of what is in
	// force (report.go).
	peer    *peerEnv
	inForce []InForce
}

// ErrHelp is returned by Parse for -h and --help: usage was printed and
// the process exits 0.
var ErrHelp = flag.ErrHelp

// setting describes one flag for parsing and for the README table.
type setting struct {
	name, usage string
	def         string
	ptr         any
}

// table is every setting, in the order of the settings table in the docs.
func (s *Settings) table() []setting {
	return slices.Concat(s.listenerTable(), s.redisTable(), s.decisionTable(), s.limitsTable())
}

// listenerTable is the part of table for the config files and the listeners.
func (s *Settings) listenerTable() []setting {
	return []setting{
		{"config", "descriptor config: a YAML file or a directory of them", "config", &s.Config},
		{"config-tree", "load every file below the --config directory, of any extension, subdirectories included (envoyproxy/ratelimit's layout)", "false", &s.ConfigTree},
		{"config-dotfiles", "with --config-tree, load files whose names start with '.' too (never Kubernetes' ..data)", "false", &s.ConfigDotfiles},
		{"config-max-bytes", "largest config file read, in bytes: a larger one is a config error naming it (entries that are not regular files, such as pipes and devices, are skipped with a warning)", strconv.Itoa(descriptors.DefaultMaxFileBytes), &s.ConfigMaxBytes},
		{"grpc-addr", "gRPC listen address (ShouldRateLimit, health, reflection); unix:PATH for a unix socket", ":8081", &s.GRPCAddr},
		{"grpc-max-connection-age", "close each gRPC connection after this long (GOAWAY, ±10% jitter) so Envoy spreads over new replicas; 0s: never", "24h", &s.GRPCMaxAge},
		{"grpc-max-connection-age-grace", "time the calls in flight get after --grpc-max-connection-age before the connection is cut", "1h", &s.GRPCMaxAgeGrace},
		{"grpc-tls-cert", "PEM certificate for TLS on the gRPC listener (with --grpc-tls-key)", "", &s.GRPCTLSCert},
		{"grpc-tls-key", "PEM private key for TLS on the gRPC listener", "", &s.GRPCTLSKey},
		{"grpc-client-ca", "PEM CAs that gRPC clients' certificates must chain to (mTLS; needs TLS)", "", &s.GRPCClientCA},
		{"grpc-client-auth", "with --grpc-client-ca: require a client certificate (require), or verify one only when sent (if-given)", "require", &s.GRPCClientAuth},
		{"grpc-client-san", "with --grpc-client-ca: a DNS name the client certificate must hold", "", &s.GRPCClientSAN},
		{"max-request-bytes", "largest gRPC request accepted, in bytes", "4194304", &s.MaxRequestBytes},
		{"http-addr", "HTTP listen address (/healthz, /readyz, /metrics, /config, /json, /ui)", ":8080", &s.HTTPAddr},
		{"http-read-timeout", "time an HTTP client has to send a whole request (headers and body)", "10s", &s.HTTPReadTimeout},
		{"json-hits-addend", "let POST /json refund (is_negative_hits) and send hits_addend above 1, as gRPC may; off, such a request gets 400 (the HTTP port is reached by kubelets and Prometheus, not only Envoy)", "false", &s.JSONHitsAddend},
		{"json", "POST /json: count (decide and count, as gRPC), check (decide every descriptor as hits_addend 0: nothing counted) or off (404)", "count", &s.JSON},
		{"healthcheck-requires", "what GET /healthcheck (200 OK or 500, as envoyproxy/ratelimit's) needs besides a live process: none, config, store or config,store", "none", &s.Healthcheck},
		{"debug-addr", "debug listen address (/rlconfig, /debug/pprof/), loopback only by default; empty turns it off", "127.0.0.1:6070", &s.DebugAddr},
		{"metrics-addr", "a listen address serving only the metrics, at --metrics-path (they are on --http-addr /metrics too); empty: none", "", &s.MetricsAddr},
		{"metrics-path", "path of the metrics on --metrics-addr", "/metrics", &s.MetricsPath},
		{"compat-metrics", "also export envoyproxy/ratelimit's metric names (ratelimit_service_rate_limit_*{domain,key1,key2}, ...)", "false", &s.CompatMetrics},
	}
}

// redisTable is the part of table for the store: Redis and its connections.
func (s *Settings) redisTable() []setting {
	return []setting{
		{"redis-url", "Redis URL (redis:// or rediss://); empty runs the in-memory store", "", &s.RedisURL},
		{"redis-sentinel-master", "Redis Sentinel master name (with --redis-sentinel-addrs)", "", &s.RedisSentinel},
		{"redis-sentinel-addrs", "comma-separated Sentinel host:port addresses", "", &s.RedisSentinels},
		{"redis-cluster-addrs", "comma-separated Redis Cluster seed host:port addresses", "", &s.RedisCluster},
		{"redis-pool-size", "connections per Redis node (0: 10 per CPU); script calls use --redis-calls-in-flight of them, the rest serve refunds, lease give-backs and probes", "0", &s.RedisPoolSize},
		{"redis-calls-in-flight", "most script calls in flight per Redis node: the decisions that arrive meanwhile share the next call (raise it when Redis's round trip is much longer than a call)", strconv.Itoa(redis.DefaultCallsInFlight), &s.RedisInFlight},
		{"redis-max-calls-in-flight", "most script calls in flight per Redis node while the oldest is slow (out 4 round trips, at least 1ms): the decisions queued behind it go in a call of their own (at least --redis-calls-in-flight, less than --redis-pool-size)", strconv.Itoa(redis.DefaultMaxCallsInFlight), &s.RedisMaxFlight},
		{"redis-lease-rate", "decisions per second on one counter at one instance from which the instance leases blocks of permits for it from Redis and spends them locally (hot keys; the fleet still never admits more than the limit); 0 turns leases off", strconv.Itoa(redis.DefaultLeaseRate), &s.RedisLeaseRate},
		{"redis-lease-span", "how much of a hot counter's traffic at this instance one lease asks for (the script grants at most half of what remains); a longer span saves calls but lets one instance hold more of the limit, up to 1s", durationText(redis.DefaultLeaseSpan), &s.RedisLeaseSpan},
		{"redis-dial-timeout", "timeout to open one Redis connection", durationText(redis.DefaultDialTimeout), &s.RedisDial},
		{"redis-read-timeout", "timeout of one Redis socket read, a backstop for a command with no deadline of its own (a decision's call ends at its budget, the caller's deadline or --store-timeout; a shorter read timeout cuts that budget)", durationText(redis.DefaultReadTimeout), &s.RedisRead},
		{"redis-write-timeout", "timeout of one Redis socket write", durationText(redis.DefaultWriteTimeout), &s.RedisWrite},
		{"redis-prefix", "prefix of every Redis key Sluice writes", redis.DefaultPrefix, &s.RedisPrefix},
		{"redis-tls-ca", "PEM file of CAs for rediss:// (default: system roots)", "", &s.RedisTLSCA},
		{"redis-tls-cert", "PEM client certificate for Redis TLS (with --redis-tls-key)", "", &s.RedisTLSCert},
		{"redis-tls-key", "PEM private key of --redis-tls-cert", "", &s.RedisTLSKey},
		{"redis-tls-skip-hostname-verification", "verify Redis's certificate chain but not the host name in it", "false", &s.RedisTLSNoHost},
		{"redis-sentinel-auth", "password (or user:password) of the Sentinels themselves", "", &s.RedisSentAuth},
		{"over-limit-cache", "Redis store: answer a repeated denied request locally until its Retry-After (exact; saves Redis calls under abuse)", "true", &s.OverLimitCache},
	}
}

// decisionTable is the part of table for reloads, answers and the defaults of rules that set none.
func (s *Settings) decisionTable() []setting {
	return []setting{
		{"reload-debounce", "wait after the last config change before reloading (at most 4x this after the first change, so a config rewritten without pause still reloads)", "250ms", &s.ReloadDebounce},
		{"health-interval", "how often readiness checks the store", "1s", &s.HealthInterval},
		{"near-limit-ratio", "share of a limit above which admitted hits count as near limit (metrics)", strconv.FormatFloat(ratelimit.DefaultNearLimitRatio, 'g', -1, 64), &s.NearLimitRatio},
		{"log-level", "debug, info, warn or error", "info", &s.LogLevel},
		{"log-format", "json, console, or auto (console on a terminal, else json)", "auto", &s.LogFormat},
		{"response-headers", "headers for Envoy to add: draft, compat, draft,compat or none", "draft", &s.ResponseHeaders},
		{"compat-header-names", "names of the compat headers: the limit, the remaining and the reset", defaultCompatNames, &s.CompatNames},
		{"shadow-mode", "put every limit in shadow mode: counted and measured, never denying", "false", &s.ShadowMode},
		{"overdraw", "count every hit a limit is sent, admitted or not (response cost, token budgets), for rules whose rate_limit sets no overdraw (configs over xDS cannot)", "false", &s.Overdraw},
		{"count-denied", "count the hits of a denied request too, as envoyproxy/ratelimit does: a hit is over the limit when the count after it would pass the limit, and counts either way; for rules whose rate_limit sets no overdraw, where --overdraw does not apply, never for a pool's class", "false", &s.CountDenied},
		{"raw-body", "send a JSON body with every 429", "false", &s.RawBody},
		{"dynamic-metadata", "return matched rules' metadata as dynamic_metadata", "false", &s.DynamicMetadata},
		{"failure-mode", "when the store fails and the domain sets no failure_mode: error (gRPC UNAVAILABLE), allow, deny or local (decide in process, each instance with the limit divided by the live instances)", "error", &s.FailureMode},
		{"local-instances", "with failure mode local: the instances to divide each limit by while the store is unavailable; 0: the live instances last counted in Redis (1 if never)", "0", &s.LocalInstances},
		{"cache", "limiter cache of every rate limit whose rate_limit and domain set no cache (Redis only): decided in process from the last shared count plus this instance's hits, through Redis near the limit", "false", &s.Cache},
		{"cache-sync", "limiter cache: how often an instance adds its pending hits to Redis and reads the shared counts back (the over-admission bound grows with it)", durationText(limiter.DefaultCachePeriod), &s.CacheSync},
		{"algorithm", "algorithm of every limit whose rate_limit sets none (configs over xDS cannot): " + rateAlgorithms() + " (fixed_window counts envoyproxy/ratelimit's epoch-aligned windows)", limiter.Algorithm(0).String(), &s.Algorithm},
		{"sub-windows", fmt.Sprintf("sub_windows of every sliding_window limit that sets none, 1 to %d (each dividing its window into whole milliseconds)", limiter.MaxSubWindows), strconv.Itoa(limiter.DefaultSubWindows), &s.SubWindows},
		{"token-bucket-burst", "burst of every token_bucket limit that sets none, as a share of its requests_per_unit (rounded up): 100% holds one window's worth, 200% two", "100%", &s.TokenBucketBurst},
		{"overlay", "policy overlay: a YAML file or directory (watched) in the config format, selecting rules of the config in force by domain and descriptor patterns and setting what a RateLimitConfig cannot carry (algorithm, rate_limits, classes, failure_mode, ...)", "", &s.Overlay},
		{"store-timeout", "budget of a store call whose caller sends no deadline (a caller's deadline is the budget otherwise, whether longer or shorter, less a tenth (2ms to 100ms) to answer when the failure mode is allow or deny); long enough to decide on a loaded host, as the peer waits for Redis", durationText(redis.DefaultCallTimeout), &s.StoreTimeout},
	}
}

// limitsTable is the part of table for shutdown, bounds, the status page and tracing.
func (s *Settings) limitsTable() []setting {
	return []setting{
		{"shutdown-delay", "time between reporting NOT_SERVING and stopping the listeners", "0s", &s.ShutdownDelay},
		{"shutdown-timeout", "time in-flight calls get to finish before they are cut", "10s", &s.ShutdownTimeout},
		{"max-counters", "in-memory store: most live counters (each about 900 B of RSS with 50 sub-windows, 370 B with one: 145 MB at the default)", strconv.Itoa(limiter.DefaultMaxCounters), &s.MaxCounters},
		{"max-descriptors", "most descriptors in one request", strconv.Itoa(rls.DefaultMaxDescriptors), &s.MaxDescriptors},
		{"max-entries", "most entries in one descriptor", strconv.Itoa(rls.DefaultMaxEntries), &s.MaxEntries},
		{"max-key-bytes", "longest entry key, in bytes", strconv.Itoa(rls.DefaultMaxKeyBytes), &s.MaxKeyBytes},
		{"ready-requires-store", "report not ready while the store is unreachable (set false when domains rely on failure_mode)", "true", &s.ReadyNeedsStore},
		{"start-without-config", "be ready before a config has loaded, answering OK for every domain until one does", "false", &s.StartWithoutConfig},
		{"ui", "serve the live status page on the HTTP listener: /ui (and /ui/api, the JSON it polls)", "true", &s.UI},
		{"ui-top-values", "descriptor values the status page and /ui/api show per rule; 0 hides values: none recorded or shown (values are often API keys, and whoever reaches the HTTP port sees them)", "0", &s.UITopValues},
		{"ui-sensitive", "with --ui-top-values: comma-separated domains (billing) and rules (billing/per_card) whose values the status page still never records", "", &s.UISensitive},
		{"tracing-enabled", "export OpenTelemetry traces over OTLP: a span per ShouldRateLimit, continuing Envoy's trace, and per store call (also TRACING_ENABLED; the endpoint from OTEL_EXPORTER_OTLP_*)", "false", &s.TracingEnabled},
		{"tracing-exporter-protocol", "OTLP transport: http (port 4318) or grpc (port 4317) (also TRACING_EXPORTER_PROTOCOL)", "http", &s.TracingExporterProtocol},
		{"tracing-service-name", "service.name of the spans (also TRACING_SERVICE_NAME, OTEL_SERVICE_NAME)", "sluice", &s.TracingServiceName},
		{"tracing-service-namespace", "service.namespace of the spans (also TRACING_SERVICE_NAMESPACE)", "", &s.TracingServiceNamespace},
		{"tracing-service-instance-id", "service.instance.id of the spans; empty: random (also TRACING_SERVICE_INSTANCE_ID)", "", &s.TracingServiceInstanceID},
		{"tracing-sampling-rate", "share of new traces sampled, 0 to 1; Envoy's sampling decision wins when it sends one (also TRACING_SAMPLING_RATE)", "1", &s.TracingSamplingRate},
		{"version", "print the version and exit", "false", &s.Version},
	}
}

// allSettings is table with the xDS source's settings (xds.go) and
// the quota service's (rlqs.go).
func (s *Settings) allSettings() []setting {
	return append(append(append(s.table(), s.XDS.table()...), s.RLQS.table()...), s.Tenants.table()...)
}

// durationText is a default duration as the settings table writes it:
// Go's duration text without zero minutes and seconds ("1m", "24h",
// "1h30m", "50ms"), as an operator would type it.
func durationText(d time.Duration) string {
	t := d.String()
	if strings.HasSuffix(t, "m0s") {
		t = strings.TrimSuffix(t, "0s")
	}
	if strings.HasSuffix(t, "h0m") {
		t = strings.TrimSuffix(t, "0m")
	}
	return t
}

// defaultCompatNames is the default of --compat-header-names.
const defaultCompatNames = "RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset"

// envName is the environment twin of a flag.
func envName(flagName string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse reads args, the SLUICE_* environment and envoyproxy/ratelimit's
// variables, in that order of precedence. It returns an error naming the
// flag or variable for a value that does not parse or is out of range, and
// for a peer setting Sluice refuses. --help prints the usage to helpOut.
// emptyVars names the variables set to the empty string (getenv returns ""
// for them as for unset ones), as emptyEnv finds them.
func Parse(args []string, getenv func(string) string, helpOut io.Writer, emptyVars ...string) (*Settings, error) {
	peer, err := readPeerEnv(getenv, emptyVars...)
	if err == nil {
		err = peer.defaults()
	}
	if err == nil {
		err = applyOtelFallbacks(peer) // tracing.go
	}
	if err != nil {
		return nil, err
	}
	s := &Settings{peer: peer}
	given := map[string][]string{}
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; --help prints below
	for _, t := range s.allSettings() {
		def, src := t.def, ""
		if v, ok := peer.vals[t.name]; ok {
			def, src = v, strings.Join(peer.from[t.name], ", ")+" (envoyproxy/ratelimit's settings)"
			given[t.name] = peer.from[t.name]
		}
		if v := getenv(envName(t.name)); v != "" && t.name != "version" {
			if _, ok := peer.vals[t.name]; ok {
				peer.override(t.name, envName(t.name))
			}
			def, src = v, envName(t.name)
			given[t.name] = []string{envName(t.name)}
		}
		if err := defineFlag(fs, t, def); err != nil {
			return nil, fmt.Errorf("%s=%q: want %s", src, def, err)
		}
	}
	fs.Usage = func() {} // a bad flag prints its error only; --help prints the flags
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(helpOut, usageText)
			fs.SetOutput(helpOut)
			fs.PrintDefaults()
			return nil, ErrHelp
		}
		return nil, fmt.Errorf("%v (sluice --help lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (did you mean 'sluice check %s'?)", fs.Arg(0), fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) {
		if _, ok := peer.vals[f.Name]; ok {
			peer.override(f.Name, "--"+f.Name)
		}
		given[f.Name] = []string{"--" + f.Name}
	})
	peer.inForce(fs)
	if err := peer.redisErr; err != nil && !ownRedisAddr(given) {
		return nil, err // a flag or SLUICE_* variable would decide the address instead
	} else if err != nil {
		peer.warnings = append(peer.warnings, err.Error()+"; not used: a flag or SLUICE_* variable gives the Redis address")
	}
	if peer.redisDefaulted() && (s.RedisCluster != "" || s.RedisSentinel != "") && !peer.overridden("redis-url") {
		// A Cluster or Sentinel given by flag or SLUICE_* replaces the
		// peer's default socket, which is no node of it.
		s.RedisURL = ""
		peer.override("redis-url", "--redis-cluster-addrs or --redis-sentinel-master")
	}
	if err := s.validate(); err != nil {
		return s, err
	}
	s.settle(fs, given)
	return s, nil
}

// EmptyEnv returns the names of the variables of environ (as os.Environ
// returns it) that are set to the empty string, for Parse.
func EmptyEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if k, v, _ := strings.Cut(kv, "="); v == "" {
			out = append(out, k)
		}
	}
	return out
}

// usageText opens the --help output.
const usageText = `usage: sluice [flags]          serve (every flag also reads SLUICE_<FLAG> and envoyproxy/ratelimit's variables)
       sluice check PATH...     validate descriptor configs and exit
       sluice version           print the version
       sluice help              print this help

flags:
`

// defineFlag defines t on fs with the default def. It returns what a value
// of t's kind looks like when def is not one.
func defineFlag(fs *flag.FlagSet, t setting, def string) error {
	usage := fmt.Sprintf("%s (env %s)", t.usage, envName(t.name))
	if t.name == "version" {
		usage = t.usage
	}
	switch p := t.ptr.(type) {
	case *string:
		fs.StringVar(p, t.name, def, usage)
	case *bool:
		b, err := strconv.ParseBool(def)
		if err != nil {
			return errors.New("true or false")
		}
		fs.BoolVar(p, t.name, b, usage)
	case *int:
		n, err := strconv.Atoi(def)
		if err != nil {
			return errors.New("a whole number")
		}
		fs.IntVar(p, t.name, n, usage)
	case *time.Duration:
		d, err := time.ParseDuration(def)
		if err != nil {
			return errors.New("a duration such as 15ms or 2s")
		}
		fs.DurationVar(p, t.name, d, usage)
	}
	return nil
}

// UnknownEnv returns a warning for every SLUICE_* variable of environ (as
// os.Environ returns it) that is no setting, naming the closest setting.
func UnknownEnv(environ []string) []string {
	known := map[string]bool{}
	var names []string
	for _, t := range (&Settings{}).allSettings() {
		known[envName(t.name)] = true
		names = append(names, envName(t.name))
	}
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "SLUICE_") || known[k] {
			continue
		}
		w := k + " is not a Sluice setting (ignored)"
		if c := closest(k, names); c != "" {
			w += "; did you mean " + c + "?"
		}
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// closest returns the name in names nearest to s (edit distance at most a
// third of s, ignoring case and '_'), "" when none is that close.
func closest(s string, names []string) string {
	norm := func(x string) string { return strings.ToLower(strings.ReplaceAll(x, "_", "")) }
	best, bestD := "", len(s)/3+1
	for _, n := range names {
		if d := editDistance(norm(s), norm(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func (s *Settings) validate() error {
	// Words are case-insensitive, as envoyproxy/ratelimit's are.
	for _, p := range []*string{&s.LogLevel, &s.LogFormat, &s.FailureMode, &s.Algorithm, &s.TokenBucketBurst, &s.Healthcheck, &s.GRPCClientAuth, &s.ResponseHeaders, &s.JSON} {
		*p = strings.ToLower(strings.TrimSpace(*p))
	}
	var err error
	if s.headers, err = rls.ParseHeaderSet(s.ResponseHeaders); err != nil {
		return fmt.Errorf("--response-headers: %v", err)
	}
	if err := s.validateDropIn(); err != nil {
		return err
	}
	if err := s.XDS.validate(); err != nil {
		return err
	}
	if err := s.Tenants.validate(); err != nil {
		return err
	}
	if err := s.RLQS.validate(); err != nil {
		return err
	}
	switch s.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level: unknown level %q (want debug, info, warn or error)", s.LogLevel)
	}
	switch s.LogFormat {
	case "json", "console", "auto":
	default:
		return fmt.Errorf("--log-format: unknown format %q (want json, console or auto)", s.LogFormat)
	}
	if _, ok := descriptors.ParseFailureMode(s.FailureMode); !ok {
		return fmt.Errorf("--failure-mode: unknown mode %q (want error, allow, deny or local)", s.FailureMode)
	}
	if s.CacheSync < time.Millisecond || s.CacheSync > 10*time.Second {
		return fmt.Errorf("--cache-sync: %v must be 1ms to 10s", s.CacheSync)
	}
	if s.LocalInstances < 0 {
		return fmt.Errorf("--local-instances: %d must be 0 (the live count) or more", s.LocalInstances)
	}
	if err := s.validateDefaults(); err != nil {
		return err
	}
	if r, err := strconv.ParseFloat(s.NearLimitRatio, 64); err != nil || r <= 0 || r > 1 {
		return fmt.Errorf("--near-limit-ratio: %q is not a number in (0, 1]", s.NearLimitRatio)
	}
	if err := s.validateOps(); err != nil { // ui.go, tracing.go
		return err
	}
	if (s.GRPCTLSCert == "") != (s.GRPCTLSKey == "") {
		return errors.New("--grpc-tls-cert and --grpc-tls-key: set both or neither")
	}
	if s.GRPCClientCA != "" && s.GRPCTLSCert == "" {
		return errors.New("--grpc-client-ca: mTLS needs --grpc-tls-cert and --grpc-tls-key")
	}
	if err := s.validateRedis(); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{{"--store-timeout", s.StoreTimeout, time.Millisecond}, {"--shutdown-delay", s.ShutdownDelay, 0}, {"--shutdown-timeout", s.ShutdownTimeout, 0},
		{"--reload-debounce", s.ReloadDebounce, 0}, {"--health-interval", s.HealthInterval, 10 * time.Millisecond},
		{"--http-read-timeout", s.HTTPReadTimeout, 10 * time.Millisecond},
		{"--redis-dial-timeout", s.RedisDial, time.Millisecond}, {"--redis-read-timeout", s.RedisRead, time.Millisecond}, {"--redis-write-timeout", s.RedisWrite, time.Millisecond}} {
		if d.v < d.min {
			return fmt.Errorf("%s: %v is below the minimum %v", d.name, d.v, d.min)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"--max-request-bytes", s.MaxRequestBytes}, {"--max-counters", s.MaxCounters}, {"--max-descriptors", s.MaxDescriptors}, {"--max-entries", s.MaxEntries}, {"--max-key-bytes", s.MaxKeyBytes}} {
		if n.v < 1 {
			return fmt.Errorf("%s: %d must be at least 1", n.name, n.v)
		}
	}
	return nil
}

// maxPoolSize bounds --redis-pool-size: far more connections than any one
// Redis node serves well, and within what go-redis accepts (int32).
const maxPoolSize = 10000

// validateRedis checks the Redis settings: the calls in flight, leases,
// the pool, a choice of Sentinel or Cluster, and the client certificate.
func (s *Settings) validateRedis() error {
	if s.RedisInFlight < 1 || s.RedisInFlight > maxPoolSize {
		return fmt.Errorf("--redis-calls-in-flight: %d must be 1 to %d", s.RedisInFlight, maxPoolSize)
	}
	if s.RedisMaxFlight < 1 || s.RedisMaxFlight > maxPoolSize {
		return fmt.Errorf("--redis-max-calls-in-flight: %d must be 1 to %d", s.RedisMaxFlight, maxPoolSize)
	}
	if s.RedisLeaseRate < 0 {
		return fmt.Errorf("--redis-lease-rate: %d must be 0 (off) or more", s.RedisLeaseRate)
	}
	if s.RedisLeaseSpan <= 0 || s.RedisLeaseSpan > time.Second {
		return fmt.Errorf("--redis-lease-span: %v must be positive and at most 1s", s.RedisLeaseSpan)
	}
	if s.RedisPoolSize < 0 || s.RedisPoolSize > maxPoolSize {
		return fmt.Errorf("--redis-pool-size: %d must be 0 (the default) to %d", s.RedisPoolSize, maxPoolSize)
	}
	if s.RedisPoolSize != 0 && s.RedisPoolSize <= s.RedisInFlight {
		return fmt.Errorf("--redis-pool-size: %d must be more than --redis-calls-in-flight (%d): the rest serve refunds, lease give-backs and probes",
			s.RedisPoolSize, s.RedisInFlight)
	}
	if s.RedisSentinel != "" && s.RedisSentinels == "" {
		return errors.New("--redis-sentinel-master: needs --redis-sentinel-addrs")
	}
	if s.RedisSentinel != "" && s.RedisCluster != "" {
		return errors.New("--redis-sentinel-master and --redis-cluster-addrs: choose one")
	}
	if (s.RedisTLSCert == "") != (s.RedisTLSKey == "") {
		return errors.New("--redis-tls-cert and --redis-tls-key: set both or neither")
	}
	return nil
}

// validateDropIn checks the settings that envoyproxy/ratelimit's
// deployments rely on: /healthcheck, the extra listeners, gRPC client
// certificates and the compat header names.
func (s *Settings) validateDropIn() error {
	s.healthNeedsConfig, s.healthNeedsStore = false, false
	for _, w := range strings.Split(s.Healthcheck, ",") {
		switch strings.TrimSpace(w) {
		case "config":
			s.healthNeedsConfig = true
		case "store":
			s.healthNeedsStore = true
		case "none", "":
		default:
			return fmt.Errorf("--healthcheck-requires: unknown %q (want none, config, store or config,store)", w)
		}
	}
	if s.JSON != "count" && s.JSON != "check" && s.JSON != "off" {
		return fmt.Errorf("--json: unknown %q (want count, check or off)", s.JSON)
	}
	if s.GRPCClientAuth != "require" && s.GRPCClientAuth != "if-given" {
		return fmt.Errorf("--grpc-client-auth: unknown %q (want require or if-given)", s.GRPCClientAuth)
	}
	if s.GRPCClientSAN != "" && s.GRPCClientCA == "" {
		return errors.New("--grpc-client-san: needs --grpc-client-ca")
	}
	if !strings.HasPrefix(s.MetricsPath, "/") {
		return fmt.Errorf("--metrics-path: %q must start with /", s.MetricsPath)
	}
	if names := strings.Split(s.CompatNames, ","); len(names) != 3 || slices.Contains(names, "") {
		return fmt.Errorf("--compat-header-names: %q: want three names, comma-separated (limit, remaining, reset)", s.CompatNames)
	}
	if s.GRPCMaxAge < 0 || s.GRPCMaxAgeGrace < 0 {
		return errors.New("--grpc-max-connection-age and --grpc-max-connection-age-grace: must not be negative")
	}
	return nil
}

// Selection is which files of a --config directory are loaded: *.yaml and
// *.yml, or with --config-tree every file below it (envoyproxy/ratelimit's
// layout), dotfiles per --config-dotfiles.
func (s *Settings) Selection() descriptors.Selection {
	sel := descriptors.Selection{Recursive: true, Dotfiles: s.ConfigDotfiles}
	if !s.ConfigTree {
		sel = descriptors.YAMLFiles
	}
	sel.MaxFileBytes, sel.MaxFileSetting = int64(s.ConfigMaxBytes), "--config-max-bytes"
	return sel
}

// CompatHeaderNames is CompatNames, validated: the names of the limit, the
// remaining and the reset headers.
func (s *Settings) CompatHeaderNames() [3]string {
	n := strings.Split(s.CompatNames, ",")
	return [3]string{strings.TrimSpace(n[0]), strings.TrimSpace(n[1]), strings.TrimSpace(n[2])}
}

// NearLimit is NearLimitRatio, validated: a share in (0, 1].
func (s *Settings) NearLimit() float64 {
	r, _ := strconv.ParseFloat(s.NearLimitRatio, 64)
	return r
}

// SplitList splits a comma-separated setting, dropping empty items.
func SplitList(v string) []string {
	var out []string
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// Failure is FailureMode, validated.
func (s *Settings) Failure() descriptors.FailureMode {
	m, _ := descriptors.ParseFailureMode(s.FailureMode)
	return m
}

// writeTable prints the settings as the README's Markdown table.
func writeTable(w io.Writer) {
	fmt.Fprintln(w, "| flag | environment | default | meaning |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, t := range (&Settings{}).allSettings() {
		def := "`" + t.def + "`"
		if t.def == "" {
			def = "(empty)"
		}
		env := "`" + envName(t.name) + "`"
		if t.name == "version" {
			env = "(none)"
		}
		fmt.Fprintf(w, "| `--%s` | %s | %s | %s |\n", t.name, env, def, t.usage)
	}
}

// Headers is ResponseHeaders, validated: the headers for Envoy to add.
func (s *Settings) Headers() rls.HeaderSet { return s.headers }

// HealthNeedsConfig and HealthNeedsStore are Healthcheck, validated: what
// GET /healthcheck needs besides a live process.
func (s *Settings) HealthNeedsConfig() bool { return s.healthNeedsConfig }

// HealthNeedsStore: see HealthNeedsConfig.
func (s *Settings) HealthNeedsStore() bool { return s.healthNeedsStore }
