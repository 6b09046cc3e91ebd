package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/limiter"
	"github.com/sluicehq/sluice/pkg/rls"
)

// settings are the server's flags, each with an environment twin
// (SLUICE_ + the flag name in upper case with '-' as '_'). A flag given on the
// command line wins over its environment variable, which wins over the
// default.
type settings struct {
	Config          string
	GRPCAddr        string
	HTTPAddr        string
	HTTPReadTimeout time.Duration
	RedisURL        string
	RedisSentinel   string
	RedisSentinels  string
	RedisCluster    string
	RedisPoolSize   int
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
	StoreTimeout    time.Duration
	ShutdownDelay   time.Duration
	ShutdownTimeout time.Duration
	MaxCounters     int
	MaxDescriptors  int
	MaxEntries      int
	MaxKeyBytes     int
	Version         bool
	ReadyNeedsStore bool

	headers rls.HeaderSet // parsed ResponseHeaders

	// wrapStore, when set (tests only), wraps the store the settings select.
	wrapStore func(limiter.Store) limiter.Store
}

// flagErrHelp is returned by parseSettings for -h and --help: usage was
// printed and the process exits 0.
var flagErrHelp = flag.ErrHelp

// setting describes one flag for parsing and for the README table.
type setting struct {
	name, usage string
	def         string
	ptr         any
}

func (s *settings) table() []setting {
	return []setting{
		{"config", "descriptor config: a YAML file or a directory of them", "config", &s.Config},
		{"grpc-addr", "gRPC listen address (ShouldRateLimit, health, reflection)", ":8081", &s.GRPCAddr},
		{"grpc-tls-cert", "PEM certificate for TLS on the gRPC listener (with --grpc-tls-key)", "", &s.GRPCTLSCert},
		{"grpc-tls-key", "PEM private key for TLS on the gRPC listener", "", &s.GRPCTLSKey},
		{"grpc-client-ca", "PEM CAs that gRPC clients' certificates must chain to (mTLS; needs TLS)", "", &s.GRPCClientCA},
		{"max-request-bytes", "largest gRPC request accepted, in bytes", "4194304", &s.MaxRequestBytes},
		{"http-addr", "HTTP listen address (/healthz, /readyz, /metrics, /config, /json)", ":8080", &s.HTTPAddr},
		{"http-read-timeout", "time an HTTP client has to send a whole request (headers and body)", "10s", &s.HTTPReadTimeout},
		{"redis-url", "Redis URL (redis:// or rediss://); empty runs the in-memory store", "", &s.RedisURL},
		{"redis-sentinel-master", "Redis Sentinel master name (with --redis-sentinel-addrs)", "", &s.RedisSentinel},
		{"redis-sentinel-addrs", "comma-separated Sentinel host:port addresses", "", &s.RedisSentinels},
		{"redis-cluster-addrs", "comma-separated Redis Cluster seed host:port addresses", "", &s.RedisCluster},
		{"redis-pool-size", "connections per Redis node (0: 10 per CPU); size it to the decisions in flight (decisions/s × latency)", "0", &s.RedisPoolSize},
		{"redis-dial-timeout", "timeout to open one Redis connection", "1s", &s.RedisDial},
		{"redis-read-timeout", "timeout of one Redis socket read", "500ms", &s.RedisRead},
		{"redis-write-timeout", "timeout of one Redis socket write", "500ms", &s.RedisWrite},
		{"redis-prefix", "prefix of every Redis key Sluice writes", "sluice:", &s.RedisPrefix},
		{"redis-tls-ca", "PEM file of CAs for rediss:// (default: system roots)", "", &s.RedisTLSCA},
		{"over-limit-cache", "Redis store: answer a repeated denied request locally until its Retry-After (exact; saves Redis calls under abuse)", "true", &s.OverLimitCache},
		{"reload-debounce", "wait after the last config change before reloading (at most 4x this after the first change, so a config rewritten without pause still reloads)", "250ms", &s.ReloadDebounce},
		{"health-interval", "how often readiness checks the store", "1s", &s.HealthInterval},
		{"near-limit-ratio", "share of a limit above which admitted hits count as near limit (metrics)", "0.8", &s.NearLimitRatio},
		{"log-level", "debug, info, warn or error", "info", &s.LogLevel},
		{"log-format", "json, console, or auto (console on a terminal, else json)", "auto", &s.LogFormat},
		{"response-headers", "headers for Envoy to add: draft, compat, draft,compat or none", "draft", &s.ResponseHeaders},
		{"raw-body", "send a JSON body with every 429", "false", &s.RawBody},
		{"dynamic-metadata", "return matched rules' metadata as dynamic_metadata", "false", &s.DynamicMetadata},
		{"failure-mode", "when the store fails and the domain sets no failure_mode: error (gRPC UNAVAILABLE), allow or deny", "error", &s.FailureMode},
		{"store-timeout", "deadline of every store call (under Envoy's 20ms filter timeout)", "15ms", &s.StoreTimeout},
		{"shutdown-delay", "time between reporting NOT_SERVING and stopping the listeners", "0s", &s.ShutdownDelay},
		{"shutdown-timeout", "time in-flight calls get to finish before they are cut", "10s", &s.ShutdownTimeout},
		{"max-counters", "in-memory store: most live counters", "1048576", &s.MaxCounters},
		{"max-descriptors", "most descriptors in one request", strconv.Itoa(rls.DefaultMaxDescriptors), &s.MaxDescriptors},
		{"max-entries", "most entries in one descriptor", strconv.Itoa(rls.DefaultMaxEntries), &s.MaxEntries},
		{"max-key-bytes", "longest entry key, in bytes", strconv.Itoa(rls.DefaultMaxKeyBytes), &s.MaxKeyBytes},
		{"ready-requires-store", "report not ready while the store is unreachable (set false when domains rely on failure_mode)", "true", &s.ReadyNeedsStore},
		{"version", "print the version and exit", "false", &s.Version},
	}
}

// envName is the environment twin of a flag.
func envName(flagName string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseSettings reads args and the environment. It returns an error naming
// the flag or variable for a value that does not parse or is out of range.
func parseSettings(args []string, getenv func(string) string, stderr io.Writer) (*settings, error) {
	s := &settings{}
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; --help prints below
	tab := s.table()
	for _, t := range tab {
		def := t.def
		if v := getenv(envName(t.name)); v != "" && t.name != "version" {
			def = v
		}
		usage := fmt.Sprintf("%s (env %s)", t.usage, envName(t.name))
		if t.name == "version" {
			usage = t.usage
		}
		var err error
		switch p := t.ptr.(type) {
		case *string:
			fs.StringVar(p, t.name, def, usage)
		case *bool:
			var b bool
			if b, err = strconv.ParseBool(def); err == nil {
				fs.BoolVar(p, t.name, b, usage)
			}
		case *int:
			var n int
			if n, err = strconv.Atoi(def); err == nil {
				fs.IntVar(p, t.name, n, usage)
			}
		case *time.Duration:
			var d time.Duration
			if d, err = time.ParseDuration(def); err == nil {
				fs.DurationVar(p, t.name, d, usage)
			}
		}
		if err != nil {
			want := map[string]string{"bool": "true or false", "int": "a whole number", "duration": "a duration such as 15ms or 2s"}
			kind := strings.TrimPrefix(fmt.Sprintf("%T", t.ptr), "*")
			if kind == "time.Duration" {
				kind = "duration"
			}
			return nil, fmt.Errorf("%s=%q: want %s", envName(t.name), def, want[kind])
		}
	}
	fs.Usage = func() {} // a bad flag prints its error only; --help prints the flags
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: sluice [flags]\n       sluice check PATH...\n\nflags:\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return nil, flagErrHelp
		}
		return nil, fmt.Errorf("%v (sluice --help lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (did you mean 'sluice check %s'?)", fs.Arg(0), fs.Arg(0))
	}
	return s, s.validate()
}

func (s *settings) validate() error {
	var err error
	if s.headers, err = rls.ParseHeaderSet(s.ResponseHeaders); err != nil {
		return fmt.Errorf("--response-headers: %v", err)
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
		return fmt.Errorf("--failure-mode: unknown mode %q (want error, allow or deny)", s.FailureMode)
	}
	if r, err := strconv.ParseFloat(s.NearLimitRatio, 64); err != nil || r <= 0 || r > 1 {
		return fmt.Errorf("--near-limit-ratio: %q is not a number in (0, 1]", s.NearLimitRatio)
	}
	if (s.GRPCTLSCert == "") != (s.GRPCTLSKey == "") {
		return errors.New("--grpc-tls-cert and --grpc-tls-key: set both or neither")
	}
	if s.GRPCClientCA != "" && s.GRPCTLSCert == "" {
		return errors.New("--grpc-client-ca: mTLS needs --grpc-tls-cert and --grpc-tls-key")
	}
	if s.RedisPoolSize < 0 {
		return fmt.Errorf("--redis-pool-size: %d must be 0 (the default) or more", s.RedisPoolSize)
	}
	if s.RedisSentinel != "" && s.RedisSentinels == "" {
		return errors.New("--redis-sentinel-master: needs --redis-sentinel-addrs")
	}
	if s.RedisSentinel != "" && s.RedisCluster != "" {
		return errors.New("--redis-sentinel-master and --redis-cluster-addrs: choose one")
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

// nearLimitRatio is NearLimitRatio, validated.
func (s *settings) nearLimitRatio() float64 {
	r, _ := strconv.ParseFloat(s.NearLimitRatio, 64)
	return r
}

// splitList splits a comma-separated setting, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// failureMode is FailureMode, validated.
func (s *settings) failureMode() descriptors.FailureMode {
	m, _ := descriptors.ParseFailureMode(s.FailureMode)
	return m
}

// writeTable prints the settings as the README's Markdown table.
func writeTable(w io.Writer) {
	fmt.Fprintln(w, "| flag | environment | default | meaning |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, t := range (&settings{}).table() {
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
