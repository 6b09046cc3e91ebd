package settings

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// envoyproxy/ratelimit's settings ("the peer's", src/settings/settings.go)
// are read as a third layer of settings, under the flags and the SLUICE_*
// variables: flag > SLUICE_* > the peer's name > default. Each of the peer's names is in peerVars, with what Sluice
// does with it: it sets Sluice settings (honoured, with the peer's formats:
// its host and port pairs, its Redis URL forms, its directory layout), or it
// is named in one start-up warning line that says what Sluice does instead,
// or it stops the start with an error (memcache).

// peerVar is one of the peer's settings.
type peerVar struct {
	name string
	// def is the peer's default ("" for none), for docs/MIGRATING.md.
	def string
	// sluice says what Sluice does with it, for docs/MIGRATING.md.
	sluice string
	// apply maps a set value onto Sluice settings (p.set), or warns
	// (p.warn), or fails. It may read related variables through p.get, and
	// is called once per set variable, so a group's function is idempotent.
	apply func(p *peerEnv, name, v string) error
}

// peerEnv translates the peer's variables into Sluice settings.
type peerEnv struct {
	getenv func(string) string
	// vals holds the Sluice setting values, by flag name.
	vals map[string]string
	// from lists, by flag name, the peer variables a value came from.
	from map[string][]string
	// over names, by flag name, the flag or SLUICE_* variable that wins
	// over the peer's value.
	over map[string]string
	// noted lists what Sluice does with set variables that need no
	// setting of its own (a value that is already Sluice's behaviour).
	noted []string
	// warnings lists the set variables Sluice does not apply, each with
	// what it does instead.
	warnings []string
	// given lists the peer variables that are set, empty ones included:
	// with any of them Sluice runs with the peer's settings (inUse), but
	// for TRACING_*, which are Sluice's own names for its tracing settings
	// too (tracing.go).
	given []string
	// empty holds the peer variables set to the empty string.
	empty map[string]bool
	// final holds, by flag name, the value in force of a setting whose
	// peer value lost to a flag or SLUICE_* variable, as logs may show it.
	final map[string]string
	// redisErr is the first error of the peer's Redis address settings:
	// it stops the start only when no flag or SLUICE_* variable gives the
	// address, which otherwise decides it instead (Parse).
	redisErr error
}

// inUse reports whether Sluice runs with the peer's settings: any of
// peerVars is set, even to the empty string. Then the peer's defaults
// apply where they change an outcome (defaults).
func (p *peerEnv) inUse() bool { return len(p.given) > 0 }

// get returns the peer variable name, "" when unset.
func (p *peerEnv) get(name string) string { return strings.TrimSpace(p.getenv(name)) }

// getOr returns the peer variable name, or def when it is unset.
func (p *peerEnv) getOr(name, def string) string {
	if v := p.get(name); v != "" {
		return v
	}
	return def
}

// set sets the Sluice setting flag to v, from the peer variables names.
func (p *peerEnv) set(flag, v string, names ...string) {
	p.vals[flag] = v
	for _, n := range names {
		if !slices.Contains(p.from[flag], n) {
			p.from[flag] = append(p.from[flag], n)
		}
	}
}

// override records that by (a flag or SLUICE_* variable) wins over the
// peer's value of flag.
func (p *peerEnv) override(flag, by string) { p.over[flag] = by }

// overridden reports whether a flag or SLUICE_* variable won over the
// peer's value of flag.
func (p *peerEnv) overridden(flag string) bool { return p.over[flag] != "" }

// redisDefaulted reports whether --redis-url is the peer's default socket,
// set because REDIS_URL is unset (defaults).
func (p *peerEnv) redisDefaulted() bool {
	return slices.ContainsFunc(p.from["redis-url"], func(n string) bool { return strings.HasPrefix(n, "REDIS_URL unset") })
}

// inForce records, for each overridden setting, the value fs holds, so
// the start-up line says what is in force; secrets are not recorded.
func (p *peerEnv) inForce(fs *flag.FlagSet) {
	for name := range p.over {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		p.final[name] = Shown(name, f.Value.String())
	}
}

// warn records that name=v is not applied, and what Sluice does instead.
func (p *peerEnv) warn(name, v, instead string) {
	p.warnings = append(p.warnings, fmt.Sprintf("%s=%s: %s", name, shown(name, v), instead))
}

// note records that name=v needs nothing: Sluice already behaves so.
func (p *peerEnv) note(name, v, why string) {
	p.noted = append(p.noted, fmt.Sprintf("%s=%s: %s", name, shown(name, v), why))
}

// shown is v as logs may show it: secrets (passwords, extra headers) are
// replaced by "(set)".
func shown(name, v string) string {
	if strings.Contains(name, "AUTH") || strings.HasSuffix(name, "_HEADERS") {
		return "(set)"
	}
	return v
}

// applied returns one line per Sluice setting the peer's variables set:
// "--redis-url=redis://host:6379 (REDIS_URL, REDIS_SOCKET_TYPE)", and the
// notes, sorted.
func (p *peerEnv) applied() []string {
	var out []string
	for flag, v := range p.vals {
		v = Shown(flag, v)
		line := fmt.Sprintf("--%s=%s (%s)", flag, v, strings.Join(p.from[flag], ", "))
		if by := p.over[flag]; by != "" {
			line = fmt.Sprintf("%s: overridden by %s", strings.Join(p.from[flag], ", "), by)
			if f, ok := p.final[flag]; ok {
				line += fmt.Sprintf(" (--%s=%s in force)", flag, f)
			}
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return append(out, p.noted...)
}

// readPeerEnv reads every set peer variable through getenv; empty names
// the variables set to the empty string, which getenv cannot tell from
// unset ones. It returns the translation, or an error naming the variable
// for a value that does not parse or that Sluice refuses (memcache, xDS).
func readPeerEnv(getenv func(string) string, empty ...string) (*peerEnv, error) {
	p := &peerEnv{getenv: getenv, vals: map[string]string{}, from: map[string][]string{}, over: map[string]string{},
		empty: map[string]bool{}, final: map[string]string{}}
	for _, n := range empty {
		p.empty[n] = true
	}
	var errs []error
	for _, pv := range peerVars {
		v := p.get(pv.name)
		if v == "" && p.getenv(pv.name) != "" {
			p.empty[pv.name] = true // only blanks: as set but empty
		}
		if (v != "" || p.empty[pv.name]) && !strings.HasPrefix(pv.name, "TRACING_") {
			p.given = append(p.given, pv.name)
		}
		if v == "" {
			continue
		}
		// A group's function runs once per set variable of the group: its
		// error is reported once.
		if err := pv.apply(p, pv.name, v); err != nil && !slices.ContainsFunc(errs, func(e error) bool { return e.Error() == err.Error() }) {
			errs = append(errs, err)
		}
	}
	return p, errors.Join(errs...)
}

// peerRedisSocket is envoyproxy/ratelimit's default REDIS_URL, a unix
// socket (its default REDIS_SOCKET_TYPE is unix).
const peerRedisSocket = "/var/run/nutcracker/ratelimit.sock"

// peerDefault names, as the source of a setting in the start-up lines, a
// default of the peer's that applies because its variable is unset.
func peerDefault(name, what string) string {
	return name + " unset: " + what + " (envoyproxy/ratelimit's default)"
}

// defaults applies, when Sluice runs with the peer's settings (inUse), the
// peer's defaults that change an outcome and that no set variable gave: a
// hit counts as the peer counts it (--count-denied: over the limit when the
// count after it passes the limit, counted either way, unless
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true), no response headers
// unless LIMIT_RESPONSE_HEADERS_ENABLED=true, and Redis at the peer's
// default socket when REDIS_URL is unset, never the in-memory store. A
// REDIS_URL set to the empty string (or to blanks) names no Redis: an error
// for Parse to weigh (redisErr). Without the peer's settings it does
// nothing: Sluice's own defaults stay.
func (p *peerEnv) defaults() error {
	if !p.inUse() {
		return nil
	}
	if p.empty["REDIS_URL"] && p.redisErr == nil {
		p.redisErr = fmt.Errorf("REDIS_URL=%q (envoyproxy/ratelimit's setting): set but empty, it names no Redis; "+
			"unset it for envoyproxy/ratelimit's default socket %s, or set host:port with REDIS_SOCKET_TYPE=tcp", p.getenv("REDIS_URL"), peerRedisSocket)
	}
	if _, ok := p.vals["count-denied"]; !ok {
		p.set("count-denied", "true", peerDefault("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
			"a request is over the limit when the count after its hits passes the limit, and its hits count either way"))
	}
	if _, ok := p.vals["response-headers"]; !ok {
		p.set("response-headers", "none", peerDefault("LIMIT_RESPONSE_HEADERS_ENABLED", "no rate limit headers"))
	}
	_, url := p.vals["redis-url"]
	_, cluster := p.vals["redis-cluster-addrs"]
	_, sentinel := p.vals["redis-sentinel-addrs"]
	if !url && !cluster && !sentinel && !p.empty["REDIS_URL"] && !strings.EqualFold(p.get("BACKEND_TYPE"), "memcache") {
		p.redis(peerDefault("REDIS_URL", "Redis at "+peerRedisSocket))
	}
	return nil
}

// ownRedisAddr reports whether a flag or SLUICE_* variable gives the Redis
// address (--redis-url, --redis-cluster-addrs, --redis-sentinel-master);
// given names, by flag name, what set each setting.
func ownRedisAddr(given map[string][]string) bool {
	for _, n := range []string{"redis-url", "redis-cluster-addrs", "redis-sentinel-master"} {
		if slices.ContainsFunc(given[n], func(by string) bool { return !isPeerVar(by) }) {
			return true
		}
	}
	return false
}

// redis maps the peer's Redis settings (peerRedis) for the variable name,
// keeping the first error for Parse to weigh (redisErr): a flag or SLUICE_*
// variable that gives the address makes the peer's address settings moot.
func (p *peerEnv) redis(name string) {
	if err := peerRedis(p, name, ""); err != nil && p.redisErr == nil {
		p.redisErr = err
	}
}

// The apply functions of peerVars.

// warned says what Sluice does instead of the variable, whatever its value.
func warned(instead string) func(*peerEnv, string, string) error {
	return func(p *peerEnv, name, v string) error {
		p.warn(name, v, instead)
		return nil
	}
}

// warnedUnless is warned, but for a value that asks for what Sluice does
// anyway (same reports whether v is such a value), which is noted.
func warnedUnless(same func(v string) bool, instead string) func(*peerEnv, string, string) error {
	return func(p *peerEnv, name, v string) error {
		if same(v) {
			p.note(name, v, "as Sluice does")
			return nil
		}
		p.warn(name, v, instead)
		return nil
	}
}

// isFalse reports a boolean false as the peer spells it.
func isFalse(v string) bool { b, err := strconv.ParseBool(v); return err == nil && !b }

// isTrue reports a boolean true as the peer spells it.
func isTrue(v string) bool { b, err := strconv.ParseBool(v); return err == nil && b }

// isZero reports a zero number or duration.
func isZero(v string) bool { return v == "0" || v == "0s" }

// direct sets flag to the value, checked by kind: "int", "bool",
// "duration", "float" or "" (any string).
func direct(flag, kind string) func(*peerEnv, string, string) error {
	return func(p *peerEnv, name, v string) error {
		if err := checkKind(name, v, kind); err != nil {
			return err
		}
		p.set(flag, v, name)
		return nil
	}
}

// checkKind returns an error naming name when v is not of kind.
func checkKind(name, v, kind string) error {
	var err error
	want := ""
	switch kind {
	case "int":
		_, err = strconv.Atoi(v)
		want = "a whole number"
	case "bool":
		_, err = strconv.ParseBool(v)
		want = "true or false"
	case "duration":
		_, err = time.ParseDuration(v)
		want = "a duration such as 10s or 1h"
	case "float":
		_, err = strconv.ParseFloat(v, 64)
		want = "a number"
	}
	if err != nil {
		return fmt.Errorf("%s=%q (envoyproxy/ratelimit's setting): want %s", name, v, want)
	}
	return nil
}

func atoi(v string) int { n, _ := strconv.Atoi(v); return n }

// listenAddr sets flag to host:port from the peer's HOST and PORT pair
// (hostVar, portVar); an unset host listens on every address, an unset
// port takes the peer's default.
func listenAddr(flag, hostVar, portVar, defPort string) func(*peerEnv, string, string) error {
	return func(p *peerEnv, name, _ string) error {
		port := p.getOr(portVar, defPort)
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("%s=%q (envoyproxy/ratelimit's setting): want a port number", portVar, port)
		}
		p.set(flag, net.JoinHostPort(p.get(hostVar), port), name)
		return nil
	}
}

// grpcAddr is listenAddr for GRPC_HOST and GRPC_PORT, unless GRPC_UDS names
// a unix socket.
func grpcAddr(p *peerEnv, name, v string) error {
	if uds := p.get("GRPC_UDS"); uds != "" {
		if name != "GRPC_UDS" {
			p.warn(name, v, "not used: GRPC_UDS is set, so gRPC listens on its unix socket")
			return nil
		}
		p.set("grpc-addr", "unix:"+uds, name)
		return nil
	}
	return listenAddr("grpc-addr", "GRPC_HOST", "GRPC_PORT", "8081")(p, name, v)
}

// logLevel maps the peer's logrus levels (any case) onto Sluice's.
func logLevel(p *peerEnv, name, v string) error {
	l := strings.ToLower(v)
	switch l {
	case "trace":
		l = "debug"
	case "warning":
		l = "warn"
	case "fatal", "panic":
		l = "error"
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("%s=%q (envoyproxy/ratelimit's setting): want trace, debug, info, warn, error, fatal or panic", name, v)
	}
	p.set("log-level", l, name)
	return nil
}

// logFormat maps the peer's text and json formats.
func logFormat(p *peerEnv, name, v string) error {
	switch strings.ToLower(v) {
	case "json":
		p.set("log-format", "json", name)
	case "text":
		p.set("log-format", "console", name)
	default:
		return fmt.Errorf("%s=%q (envoyproxy/ratelimit's setting): want text or json", name, v)
	}
	return nil
}

// configType accepts FILE, and GRPC_XDS_SOTW, which turns on the xDS
// config source with the peer's xDS client settings (peerXDS).
func configType(p *peerEnv, name, v string) error {
	switch strings.ToUpper(v) {
	case "FILE":
		p.note(name, v, "config from files (RUNTIME_* or --config)")
		return nil
	case "GRPC_XDS_SOTW":
		return peerXDS(p)
	}
	return fmt.Errorf("%s=%q (envoyproxy/ratelimit's setting): want FILE or GRPC_XDS_SOTW", name, v)
}

// xdsVar is the apply function of the xDS client settings: with
// CONFIG_TYPE=FILE the peer does not read them either.
func xdsVar(p *peerEnv, name, v string) error {
	if strings.EqualFold(p.get("CONFIG_TYPE"), "GRPC_XDS_SOTW") {
		return nil // mapped with CONFIG_TYPE itself (peerXDS)
	}
	p.warn(name, v, "not used: CONFIG_TYPE is not GRPC_XDS_SOTW (the config comes from files)")
	return nil
}

// runtimeLayout sets --config to the peer's config directory,
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, and the layout
// settings: every file below it, of any extension, dotfiles per
// RUNTIME_IGNOREDOTFILES.
func runtimeLayout(p *peerEnv, name, v string) error {
	names := []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}
	for _, b := range []string{"RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT"} {
		if x := p.get(b); x != "" {
			if err := checkKind(b, x, "bool"); err != nil {
				return err
			}
		}
	}
	set := false
	for _, n := range names {
		set = set || p.get(n) != ""
	}
	if !set {
		// RUNTIME_IGNOREDOTFILES or RUNTIME_WATCH_ROOT alone: they qualify a
		// directory that is not given.
		p.warn(name, v, "not used: RUNTIME_ROOT, RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY are unset (the config is --config)")
		return nil
	}
	dir := filepath.Join(p.getOr("RUNTIME_ROOT", "/srv/runtime_data/current"), p.get("RUNTIME_SUBDIRECTORY"),
		p.getOr("RUNTIME_APPDIRECTORY", "config"))
	// Each setting names the variables that decided it: the directory's
	// (and so the layout's), and RUNTIME_IGNOREDOTFILES for dotfiles when it
	// is set; RUNTIME_WATCH_ROOT decides nothing.
	var layout []string
	for _, n := range names {
		if p.get(n) != "" {
			layout = append(layout, n)
		}
	}
	p.set("config", dir, layout...)
	p.set("config-tree", "true", layout...)
	dotfiles := layout
	if p.get("RUNTIME_IGNOREDOTFILES") != "" {
		dotfiles = []string{"RUNTIME_IGNOREDOTFILES"}
	}
	// The peer's default (RUNTIME_IGNOREDOTFILES=false) loads dotfiles.
	p.set("config-dotfiles", strconv.FormatBool(!isTrue(p.get("RUNTIME_IGNOREDOTFILES"))), dotfiles...)
	if name == "RUNTIME_WATCH_ROOT" {
		p.note(name, v, "Sluice watches the config directory and the one holding it either way (edits and symlink swaps)")
	}
	return nil
}

// grpcTLS maps GRPC_SERVER_USE_TLS and its files. The peer reads the cert,
// key and client CA only when GRPC_SERVER_USE_TLS is true, and requires a
// client certificate when GRPC_CLIENT_TLS_CACERT is set.
// GRPC_SERVER_TLS_CA_CERT is not one of the peer's settings (the peer
// ignores it) but Envoy Gateway sets it to the CA of the certificates it
// gives Envoy and the rate limit service: Sluice verifies a client
// certificate against it when one is sent, and still accepts clients that
// send none, as the peer does.
func grpcTLS(p *peerEnv, name, v string) error {
	use := p.get("GRPC_SERVER_USE_TLS")
	if use != "" {
		if err := checkKind("GRPC_SERVER_USE_TLS", use, "bool"); err != nil {
			return err
		}
	}
	if !isTrue(use) {
		if name != "GRPC_SERVER_USE_TLS" {
			p.warn(name, v, "not used: GRPC_SERVER_USE_TLS is not true, so gRPC is plaintext (as in envoyproxy/ratelimit)")
		} else {
			p.note(name, v, "plaintext gRPC, as Sluice's default")
		}
		return nil
	}
	cert, key := p.get("GRPC_SERVER_TLS_CERT"), p.get("GRPC_SERVER_TLS_KEY")
	if cert == "" || key == "" {
		return errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (envoyproxy/ratelimit's settings)")
	}
	p.set("grpc-tls-cert", cert, "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT")
	p.set("grpc-tls-key", key, "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_KEY")
	switch ca, egCA := p.get("GRPC_CLIENT_TLS_CACERT"), p.get("GRPC_SERVER_TLS_CA_CERT"); {
	case ca != "":
		p.set("grpc-client-ca", ca, "GRPC_CLIENT_TLS_CACERT")
		p.set("grpc-client-auth", "require", "GRPC_CLIENT_TLS_CACERT")
		if egCA != "" && name == "GRPC_SERVER_TLS_CA_CERT" {
			p.warn(name, v, "not used: GRPC_CLIENT_TLS_CACERT names the client CA")
		}
	case egCA != "":
		p.set("grpc-client-ca", egCA, "GRPC_SERVER_TLS_CA_CERT")
		p.set("grpc-client-auth", "if-given", "GRPC_SERVER_TLS_CA_CERT")
	}
	if san := p.get("GRPC_CLIENT_TLS_SAN"); san != "" {
		if p.vals["grpc-client-ca"] == "" {
			p.warn("GRPC_CLIENT_TLS_SAN", san, "not used: no client CA (GRPC_CLIENT_TLS_CACERT) to verify client certificates with")
		} else {
			p.set("grpc-client-san", san, "GRPC_CLIENT_TLS_SAN")
		}
	}
	return nil
}

// usePrometheus maps USE_PROMETHEUS, PROMETHEUS_ADDR and PROMETHEUS_PATH:
// the peer serves its metrics, under its names, on their own listener.
func usePrometheus(p *peerEnv, name, v string) error {
	use := p.get("USE_PROMETHEUS")
	if use != "" {
		if err := checkKind("USE_PROMETHEUS", use, "bool"); err != nil {
			return err
		}
	}
	if !isTrue(use) {
		if name == "USE_PROMETHEUS" {
			p.note(name, v, "Sluice's own metrics on --http-addr /metrics only")
		} else {
			p.warn(name, v, "not used: USE_PROMETHEUS is not true (Sluice's metrics are on --http-addr /metrics)")
		}
		return nil
	}
	p.set("compat-metrics", "true", "USE_PROMETHEUS")
	p.set("metrics-addr", p.getOr("PROMETHEUS_ADDR", ":9090"), "USE_PROMETHEUS", "PROMETHEUS_ADDR")
	p.set("metrics-path", p.getOr("PROMETHEUS_PATH", "/metrics"), "USE_PROMETHEUS", "PROMETHEUS_PATH")
	return nil
}

// healthcheck adds what /healthcheck requires: the config
// (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED) and Redis
// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
func healthcheck(p *peerEnv, name, _ string) error {
	var req []string
	for _, c := range []struct{ name, what string }{
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "config"}, {"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "store"}} {
		x := p.get(c.name)
		if x == "" {
			continue
		}
		if err := checkKind(c.name, x, "bool"); err != nil {
			return err
		}
		if isTrue(x) {
			req = append(req, c.what)
		}
	}
	if len(req) == 0 {
		req = []string{"none"}
	}
	p.set("healthcheck-requires", strings.Join(req, ","), name)
	return nil
}

// stopIncrement maps STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: false (the
// peer's default) counts the hits of a denied request too, as
// --count-denied; true counts nothing of a denied request, as Sluice's own
// default. A rule's own overdraw, and --overdraw, win over either.
func stopIncrement(p *peerEnv, name, v string) error {
	if err := checkKind(name, v, "bool"); err != nil {
		return err
	}
	p.set("count-denied", strconv.FormatBool(!isTrue(v)), name)
	return nil
}

// compatHeaders maps LIMIT_RESPONSE_HEADERS_ENABLED and the three names:
// the peer sends its three headers when it is true, none otherwise.
func compatHeaders(p *peerEnv, name, v string) error {
	en := p.get("LIMIT_RESPONSE_HEADERS_ENABLED")
	if en != "" {
		if err := checkKind("LIMIT_RESPONSE_HEADERS_ENABLED", en, "bool"); err != nil {
			return err
		}
	}
	if !isTrue(en) {
		if name == "LIMIT_RESPONSE_HEADERS_ENABLED" {
			p.set("response-headers", "none", name)
		} else {
			p.warn(name, v, "not used: LIMIT_RESPONSE_HEADERS_ENABLED is not true")
		}
		return nil
	}
	p.set("response-headers", "compat", "LIMIT_RESPONSE_HEADERS_ENABLED")
	names := make([]string, 3)
	for i, n := range []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"} {
		names[i] = p.getOr(n, strings.Split(defaultCompatNames, ",")[i])
		if strings.Contains(names[i], ",") {
			return fmt.Errorf("%s=%q (envoyproxy/ratelimit's setting): a header name cannot hold a comma", n, names[i])
		}
	}
	p.set("compat-header-names", strings.Join(names, ","), "LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER",
		"LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER")
	return nil
}

// localCache maps LOCAL_CACHE_SIZE_IN_BYTES: above 0 the peer keeps denied
// keys locally; Sluice's over-limit cache does that, sized by itself.
func localCache(p *peerEnv, name, v string) error {
	if err := checkKind(name, v, "int"); err != nil {
		return err
	}
	p.set("over-limit-cache", strconv.FormatBool(atoi(v) > 0), name)
	return nil
}

// redisTimeout maps REDIS_TIMEOUT, the peer's timeout of a connection and
// of its reads and writes.
func redisTimeout(p *peerEnv, name, v string) error {
	if err := checkKind(name, v, "duration"); err != nil {
		return err
	}
	for _, f := range []string{"redis-dial-timeout", "redis-read-timeout", "redis-write-timeout"} {
		p.set(f, v, name)
	}
	return nil
}

// backend refuses memcache and checks BACKEND_TYPE; Redis is set up by
// peerRedis.
func backend(p *peerEnv, name, v string) error {
	switch strings.ToLower(v) {
	case "redis":
		p.redis(name)
		return nil
	case "memcache":
		return errors.New("BACKEND_TYPE=memcache: Sluice keeps its counters in Redis (or in memory), not memcache; " +
			"point REDIS_URL (or --redis-url) at a Redis and unset BACKEND_TYPE")
	}
	return fmt.Errorf("%s=%q (envoyproxy/ratelimit's setting): want redis (memcache is not supported)", name, v)
}

// memcacheVar is the apply function of MEMCACHE_*: refused with
// BACKEND_TYPE=memcache, ignored otherwise (as the peer ignores them).
func memcacheVar(p *peerEnv, name, v string) error {
	if strings.EqualFold(p.get("BACKEND_TYPE"), "memcache") {
		return nil // refused with BACKEND_TYPE itself
	}
	p.warn(name, v, "not used: Sluice keeps its counters in Redis, never memcache")
	return nil
}

// peerRedis maps the peer's Redis settings onto Sluice's: REDIS_TYPE
// (single, sentinel or cluster, any case), REDIS_SOCKET_TYPE (tcp or unix),
// REDIS_URL in the peer's forms (host:port or a socket path; sentinel:
// "master,host:port,host:port"; cluster: "host:port,host:port"; a redis://
// URL is taken as it is), REDIS_AUTH (password, or user:password),
// REDIS_TLS and REDIS_SENTINEL_AUTH.
func peerRedis(p *peerEnv, name, _ string) error {
	for _, b := range []string{"REDIS_TLS"} {
		if x := p.get(b); x != "" {
			if err := checkKind(b, x, "bool"); err != nil {
				return err
			}
		}
	}
	from := []string{name}
	for _, n := range []string{"REDIS_URL", "REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_AUTH", "REDIS_TLS", "BACKEND_TYPE"} {
		if p.get(n) != "" && n != name {
			from = append(from, n)
		}
	}
	raw := p.getOr("REDIS_URL", peerRedisSocket)
	// The peer's default socket type is unix; a REDIS_URL that is plainly
	// host:port (a new user's REDIS_URL=127.0.0.1:6379) means TCP.
	defSocket := "unix"
	if !strings.HasPrefix(raw, "/") && !strings.HasPrefix(raw, ".") {
		defSocket = "tcp"
	}
	socket := strings.ToLower(p.getOr("REDIS_SOCKET_TYPE", defSocket))
	switch {
	case socket == "tcp" && p.get("REDIS_URL") == "":
		return fmt.Errorf("REDIS_SOCKET_TYPE=tcp with REDIS_URL unset (envoyproxy/ratelimit's settings): its default REDIS_URL is the socket path %s; "+
			"set REDIS_URL=host:port (or --redis-url)", peerRedisSocket)
	case socket != "unix" && socket != "tcp":
		return fmt.Errorf("REDIS_SOCKET_TYPE=%q (envoyproxy/ratelimit's setting): want tcp or unix", socket)
	case socket == "unix" && defSocket == "tcp" && !strings.Contains(raw, "://"):
		return fmt.Errorf("REDIS_SOCKET_TYPE=unix with REDIS_URL=%q (envoyproxy/ratelimit's settings): a unix socket is a path; "+
			"for host:port set REDIS_SOCKET_TYPE=tcp", RedactURL(raw))
	}
	user, pass, hasUser := strings.Cut(p.get("REDIS_AUTH"), ":")
	if !hasUser {
		user, pass = "", p.get("REDIS_AUTH")
	}
	scheme := "redis"
	if isTrue(p.get("REDIS_TLS")) {
		scheme = "rediss"
	}
	switch typ := strings.ToLower(p.getOr("REDIS_TYPE", "single")); typ {
	case "single":
		if strings.Contains(raw, ",") {
			return fmt.Errorf("REDIS_URL=%q with REDIS_TYPE=single (envoyproxy/ratelimit's settings): want one address, host:port or a socket path "+
				"(for several, set REDIS_TYPE=cluster or sentinel)", RedactURL(raw))
		}
		p.set("redis-url", redisURL(scheme, socket, raw, user, pass), from...)
	case "cluster", "sentinel":
		addrs := SplitList(raw)
		if typ == "cluster" && (p.get("REDIS_URL") == "" || len(addrs) == 0) {
			return fmt.Errorf("REDIS_URL=%q with REDIS_TYPE=cluster (envoyproxy/ratelimit's settings): want the cluster's nodes, \"host:port,host:port\"",
				RedactURL(p.get("REDIS_URL")))
		}
		if typ == "sentinel" {
			if len(addrs) < 2 {
				return fmt.Errorf("REDIS_URL=%q with REDIS_TYPE=sentinel (envoyproxy/ratelimit's settings): want the master name and the sentinels, \"mymaster,host:port,host:port\"", RedactURL(raw))
			}
			p.set("redis-sentinel-master", addrs[0], from...)
			addrs = addrs[1:]
		}
		for i, a := range addrs {
			addrs[i] = hostPort(a)
		}
		flag := map[string]string{"cluster": "redis-cluster-addrs", "sentinel": "redis-sentinel-addrs"}[typ]
		p.set(flag, strings.Join(addrs, ","), from...)
		if pass != "" || scheme == "rediss" {
			// The URL carries the credentials and TLS of every node.
			p.set("redis-url", redisURL(scheme, "tcp", addrs[0], user, pass), from...)
		}
		if sa := p.get("REDIS_SENTINEL_AUTH"); sa != "" && typ == "sentinel" {
			p.set("redis-sentinel-auth", sa, "REDIS_SENTINEL_AUTH")
		}
	default:
		return fmt.Errorf("REDIS_TYPE=%q (envoyproxy/ratelimit's setting): want single, sentinel or cluster", typ)
	}
	return nil
}

// redisURL builds a Sluice Redis URL from the peer's address: a unix
// socket path or host:port; a redis:// or rediss:// URL is kept.
func redisURL(scheme, socket, addr, user, pass string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	var userinfo string
	switch {
	case user != "":
		userinfo = user + ":" + pass + "@"
	case pass != "":
		userinfo = ":" + pass + "@"
	}
	if socket == "unix" {
		return "unix://" + userinfo + addr
	}
	return scheme + "://" + userinfo + addr
}

// hostPort strips a redis:// URL down to its host:port.
func hostPort(a string) string {
	if _, rest, ok := strings.Cut(a, "://"); ok {
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			rest = rest[i+1:]
		}
		rest, _, _ = strings.Cut(rest, "/")
		return rest
	}
	return a
}

// redisTLS is direct for the REDIS_TLS_* files, which the peer reads only
// with REDIS_TLS=true.
func redisTLS(flag, kind string) func(*peerEnv, string, string) error {
	return func(p *peerEnv, name, v string) error {
		if !isTrue(p.get("REDIS_TLS")) {
			p.warn(name, v, "not used: REDIS_TLS is not true")
			return nil
		}
		return direct(flag, kind)(p, name, v)
	}
}

// redisVar is the apply function of the Redis address settings.
func redisVar(p *peerEnv, name, v string) error {
	if strings.EqualFold(p.get("BACKEND_TYPE"), "memcache") {
		p.warn(name, v, "not used: BACKEND_TYPE is memcache")
		return nil
	}
	if name == "REDIS_SENTINEL_AUTH" && !strings.EqualFold(p.get("REDIS_TYPE"), "sentinel") {
		p.warn(name, v, "not used: REDIS_TYPE is not sentinel")
		return nil
	}
	// With REDIS_URL unset the peer dials its default socket, and so does
	// Sluice (peerRedis), never counting in memory instead.
	p.redis(name)
	return nil
}

// writePeerTable prints peerVars as docs/MIGRATING.md's Markdown table.
func writePeerTable(w io.Writer) {
	fmt.Fprintln(w, "| envoyproxy/ratelimit | its default | in Sluice |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	for _, pv := range peerVars {
		def := "`" + pv.def + "`"
		if pv.def == "" {
			def = "(empty)"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s |\n", pv.name, def, pv.sluice)
	}
}

// Texts shared by several peerVars.
const (
	noStatsd = "no statsd: Sluice serves Prometheus metrics on --http-addr /metrics (USE_PROMETHEUS=true adds envoyproxy/ratelimit's names)"
	noPerSec = "not used: Sluice keeps every limit in the one Redis of REDIS_URL"
	noPipe   = "not used: concurrent decisions share script calls by themselves, with no window to wait (--redis-calls-in-flight)"
)

// peerVars are envoyproxy/ratelimit's settings, in the order of its
// src/settings/settings.go (and GRPC_SERVER_TLS_CA_CERT, which Envoy
// Gateway sets), each with what Sluice does with it.
var peerVars = []peerVar{
	{"PROTO", "tcp", "`tcp` as Sluice does; anything else warned (use `GRPC_UDS` for a unix socket)",
		warnedUnless(func(v string) bool { return strings.EqualFold(v, "tcp") }, "Sluice listens on TCP (GRPC_UDS: a unix socket for gRPC)")},
	{"HOST", "0.0.0.0", "with `PORT`: `--http-addr` (unset: every address)", listenAddr("http-addr", "HOST", "PORT", "8080")},
	{"PORT", "8080", "with `HOST`: `--http-addr`", listenAddr("http-addr", "HOST", "PORT", "8080")},
	{"DEBUG_HOST", "0.0.0.0", "with `DEBUG_PORT`: `--debug-addr` (`/rlconfig`, `/debug/pprof/`); both unset: Sluice's `127.0.0.1:6070` (loopback only)",
		listenAddr("debug-addr", "DEBUG_HOST", "DEBUG_PORT", "6070")},
	{"DEBUG_PORT", "6070", "with `DEBUG_HOST` (unset: every address, as the peer): `--debug-addr`", listenAddr("debug-addr", "DEBUG_HOST", "DEBUG_PORT", "6070")},
	{"GRPC_UDS", "", "`--grpc-addr=unix:PATH` (wins over `GRPC_HOST`/`GRPC_PORT`)", grpcAddr},
	{"GRPC_HOST", "0.0.0.0", "with `GRPC_PORT`: `--grpc-addr`", grpcAddr},
	{"GRPC_PORT", "8081", "with `GRPC_HOST`: `--grpc-addr`", grpcAddr},
	{"GRPC_MAX_CONNECTION_AGE", "24h", "`--grpc-max-connection-age`", direct("grpc-max-connection-age", "duration")},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", "`--grpc-max-connection-age-grace`", direct("grpc-max-connection-age-grace", "duration")},
	{"GRPC_SERVER_USE_TLS", "false", "`true`: TLS on gRPC with the files below; the files are not read otherwise", grpcTLS},
	{"GRPC_SERVER_TLS_CERT", "", "`--grpc-tls-cert` (with `GRPC_SERVER_USE_TLS=true`)", grpcTLS},
	{"GRPC_SERVER_TLS_KEY", "", "`--grpc-tls-key` (with `GRPC_SERVER_USE_TLS=true`)", grpcTLS},
	{"GRPC_CLIENT_TLS_CACERT", "", "`--grpc-client-ca` with `--grpc-client-auth=require` (mTLS)", grpcTLS},
	{"GRPC_CLIENT_TLS_SAN", "", "`--grpc-client-san`: the DNS name client certificates must hold", grpcTLS},
	{"GRPC_SERVER_TLS_CA_CERT", "", "not read by envoyproxy/ratelimit, set by Envoy Gateway: `--grpc-client-ca` with `--grpc-client-auth=if-given` " +
		"(a client certificate that is sent must chain to it; clients that send none are still served, as before)", grpcTLS},
	{"LOG_LEVEL", "WARN", "`--log-level`, any case (`trace` is `debug`; `fatal`, `panic` are `error`)", logLevel},
	{"LOG_FORMAT", "text", "`--log-format`: `text` is `console`, `json` is `json`", logFormat},
	{"CONFIG_TYPE", "FILE", "`FILE`: the config from files; `GRPC_XDS_SOTW`: the config over xDS (`--xds-server`), with the settings below", configType},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", "`--start-without-config`: ready before the first config, answering OK for every domain " +
		"(without it Sluice starts too, not ready until a config loads)", forceStart},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", "`--xds-node-id` (with `GRPC_XDS_SOTW`, `default` when unset); ignored with `CONFIG_TYPE=FILE`", xdsVar},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", "`--xds-node-metadata` (`key=value,...`); ignored with `CONFIG_TYPE=FILE`", xdsVar},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", "`--xds-server` (with `GRPC_XDS_SOTW`, `localhost:18000` when unset); ignored with `CONFIG_TYPE=FILE`", xdsVar},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", "warned: connection attempts follow the `XDS_CLIENT_BACKOFF_*` backoff", xdsVar},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", "`--xds-headers` (`key:value,...`); ignored with `CONFIG_TYPE=FILE`", xdsVar},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", "`true`: `--xds-tls` with the files below; the files are not read otherwise", xdsVar},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", "`--xds-tls-cert` (with `CONFIG_GRPC_XDS_SERVER_USE_TLS=true`)", xdsVar},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", "`--xds-tls-key` (with `CONFIG_GRPC_XDS_SERVER_USE_TLS=true`)", xdsVar},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", "`--xds-tls-ca` (with `CONFIG_GRPC_XDS_SERVER_USE_TLS=true`; instead of the system roots, where the peer adds it to them)", xdsVar},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", "`--xds-tls-server-name` (with `CONFIG_GRPC_XDS_SERVER_USE_TLS=true`)", xdsVar},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", "`--xds-backoff-initial` (Sluice's default: 500ms)", xdsVar},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", "`--xds-backoff-max` (Sluice's default: 30s)", xdsVar},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", "`--xds-backoff-jitter` (the peer uses it as its backoff's growth factor, so its waits never grow; Sluice's double)", xdsVar},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", "`false`: `--xds-backoff-jitter=0`", xdsVar},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", "`--xds-max-msg-bytes`", xdsVar},
	{"USE_DOG_STATSD", "false", "`false` as Sluice; `true` warned (" + noStatsd + ")", warnedUnless(isFalse, noStatsd)},
	{"USE_DOG_STATSD_MOGRIFIERS", "", "warned (" + noStatsd + ")", warned(noStatsd)},
	{"USE_STATSD", "true", "`false` as Sluice; `true` warned (" + noStatsd + ")", warnedUnless(isFalse, noStatsd)},
	{"STATSD_HOST", "localhost", "warned (" + noStatsd + ")", warned(noStatsd)},
	{"STATSD_PORT", "8125", "warned (" + noStatsd + ")", warned(noStatsd)},
	{"EXTRA_TAGS", "", "warned: Prometheus labels are fixed (domain, rule)", warned("not used: metric labels are fixed (domain, rule; key1, key2 with USE_PROMETHEUS)")},
	{"STATS_FLUSH_INTERVAL", "10s", "warned: Prometheus is scraped, nothing is flushed", warned("not used: Prometheus metrics are scraped, nothing is flushed")},
	{"DISABLE_STATS", "false", "`false` as Sluice; `true` warned (metrics are always kept)", warnedUnless(isFalse, "Sluice always keeps its metrics (they cost no network traffic until scraped)")},
	{"USE_PROMETHEUS", "false", "`true`: `--compat-metrics` (envoyproxy/ratelimit's metric names) served on `--metrics-addr`", usePrometheus},
	{"PROMETHEUS_ADDR", ":9090", "`--metrics-addr` (with `USE_PROMETHEUS=true`)", usePrometheus},
	{"PROMETHEUS_PATH", "/metrics", "`--metrics-path` (with `USE_PROMETHEUS=true`)", usePrometheus},
	{"PROMETHEUS_MAPPER_YAML", "", "warned: the default mapping's names are built in; a custom mapping file is not read",
		warned("not read: Sluice exports the default mapping's names (ratelimit_service_rate_limit_*{domain,key1,key2}) itself")},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", "with `RUNTIME_SUBDIRECTORY` and `RUNTIME_APPDIRECTORY`: `--config=ROOT/SUBDIRECTORY/APPDIRECTORY` and `--config-tree` (every file below it, any extension)", runtimeLayout},
	{"RUNTIME_SUBDIRECTORY", "", "see `RUNTIME_ROOT`", runtimeLayout},
	{"RUNTIME_APPDIRECTORY", "config", "see `RUNTIME_ROOT`", runtimeLayout},
	{"RUNTIME_IGNOREDOTFILES", "false", "`--config-dotfiles` is its opposite (Kubernetes' `..data` entries are never loaded)", runtimeLayout},
	{"RUNTIME_WATCH_ROOT", "true", "either value works: Sluice watches the config directory and the one holding it (edits and ConfigMap symlink swaps)", runtimeLayout},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", "warned: every key expires once its counter no longer matters (a window's within two windows, a token bucket's when it is full again), set in the same script as the write",
		warned("not used: each Redis key expires once its counter no longer matters (within two windows of its last write; a token bucket when it is full again), set atomically with it")},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", "`--over-limit-cache`: on when above 0, off at 0 (Sluice sizes the cache itself)", localCache},
	{"NEAR_LIMIT_RATIO", "0.8", "`--near-limit-ratio`", direct("near-limit-ratio", "float")},
	{"CACHE_KEY_PREFIX", "", "`--redis-prefix` (Sluice's keys differ from the peer's anyway: counters are not shared)", direct("redis-prefix", "")},
	{"BACKEND_TYPE", "redis", "`redis`: Redis at `REDIS_URL` (or its default socket); `memcache`: refused at start", backend},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", "`false` or unset: `--count-denied=true` (a request is over the limit when the count after its hits passes the limit, " +
		"and its hits count either way, as in the peer); `true`: `--count-denied=false` (a denied request consumes nothing); " +
		"a rule's own `overdraw:`, and `--overdraw`, win; a pool's class never counts a shed request", stopIncrement},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", "`true`: `--response-headers=compat` (the peer's three headers, and `Retry-After`); " +
		"`false` or unset: `--response-headers=none`", compatHeaders},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", "`--compat-header-names` (with `LIMIT_RESPONSE_HEADERS_ENABLED=true`)", compatHeaders},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", "`--compat-header-names` (with `LIMIT_RESPONSE_HEADERS_ENABLED=true`)", compatHeaders},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", "`--compat-header-names` (with `LIMIT_RESPONSE_HEADERS_ENABLED=true`)", compatHeaders},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", "`--healthcheck-requires=config`: `/healthcheck` answers 500 until a config is loaded", healthcheck},
	{"REDIS_SOCKET_TYPE", "unix", "`unix`: `--redis-url=unix://PATH`; `tcp`: `redis://HOST:PORT` (unset: `tcp` when `REDIS_URL` is `host:port`, `unix` when it is a path)", redisVar},
	{"REDIS_TYPE", "SINGLE", "`single`: `--redis-url`; `sentinel`: `--redis-sentinel-master`, `--redis-sentinel-addrs`; `cluster`: `--redis-cluster-addrs` (any case)", redisVar},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", "the peer's forms: `host:port` or a socket path; sentinel `master,host:port,...`; cluster `host:port,...`; a `redis://` URL as is; " +
		"unset, with any of the peer's settings: its default socket (never the in-memory store); set but empty (or blank), or no address for a cluster: refused at start, " +
		"unless a flag or `SLUICE_*` variable gives the address", redisVar},
	{"REDIS_POOL_SIZE", "10", "`--redis-pool-size` (connections per node)", direct("redis-pool-size", "int")},
	{"REDIS_AUTH", "", "the password (or `user:password`) in `--redis-url`", redisVar},
	{"REDIS_TLS", "false", "`true`: `rediss://`", redisVar},
	{"REDIS_TLS_CLIENT_CERT", "", "`--redis-tls-cert` (with `REDIS_TLS=true`)", redisTLS("redis-tls-cert", "")},
	{"REDIS_TLS_CLIENT_KEY", "", "`--redis-tls-key` (with `REDIS_TLS=true`)", redisTLS("redis-tls-key", "")},
	{"REDIS_TLS_CACERT", "", "`--redis-tls-ca` (with `REDIS_TLS=true`; instead of the system roots, where the peer adds it to them)", redisTLS("redis-tls-ca", "")},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", "`--redis-tls-skip-hostname-verification` (with `REDIS_TLS=true`; the chain is still verified)",
		redisTLS("redis-tls-skip-hostname-verification", "bool")},
	{"REDIS_PIPELINE_WINDOW", "0", "`0` as Sluice; else warned (" + noPipe + ")", warnedUnless(isZero, noPipe)},
	{"REDIS_PIPELINE_LIMIT", "0", "`0` as Sluice; else warned (" + noPipe + ")", warnedUnless(isZero, noPipe)},
	{"REDIS_PERSECOND", "false", "`false` as Sluice; `true` warned (" + noPerSec + ")", warnedUnless(isFalse, noPerSec)},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"REDIS_PERSECOND_TYPE", "SINGLE", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"REDIS_PERSECOND_POOL_SIZE", "10", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"REDIS_PERSECOND_AUTH", "", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"REDIS_PERSECOND_TLS", "false", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"REDIS_SENTINEL_AUTH", "", "`--redis-sentinel-auth` (with `REDIS_TYPE=sentinel`)", redisVar},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", "`--healthcheck-requires=store`: `/healthcheck` answers 500 while Redis is unreachable", healthcheck},
	{"REDIS_TIMEOUT", "10s", "`--redis-dial-timeout`, `--redis-read-timeout` and `--redis-write-timeout` (each decision keeps its own `--store-timeout`)", redisTimeout},
	{"REDIS_PERSECOND_TIMEOUT", "10s", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", "`WAIT` as Sluice (a call waits for a free connection within its deadline); else warned",
		warnedUnless(func(v string) bool { return strings.EqualFold(v, "WAIT") }, "a call waits for a free connection within its deadline (WAIT)")},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", "warned (" + noPerSec + ")", warned(noPerSec)},
	{"MEMCACHE_HOST_PORT", "", "refused with `BACKEND_TYPE=memcache`; warned otherwise", memcacheVar},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", "refused with `BACKEND_TYPE=memcache`; warned otherwise", memcacheVar},
	{"MEMCACHE_SRV", "", "refused with `BACKEND_TYPE=memcache`; warned otherwise", memcacheVar},
	{"MEMCACHE_SRV_REFRESH", "0", "refused with `BACKEND_TYPE=memcache`; warned otherwise", memcacheVar},
	{"MEMCACHE_TLS", "false", "refused with `BACKEND_TYPE=memcache`; warned otherwise", memcacheVar},
	{"MEMCACHE_TLS_CLIENT_CERT", "", "refused with `BACKEND_TYPE=memcache`; warned otherwise", memcacheVar},
	{"MEMCACHE_TLS_CLIENT_KEY", "", "refused with `BACKEND_TYPE=memcache`; warned otherwise", memcacheVar},
	{"MEMCACHE_TLS_CACERT", "", "refused with `BACKEND_TYPE=memcache`; warned otherwise", memcacheVar},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", "refused with `BACKEND_TYPE=memcache`; warned otherwise", memcacheVar},
	{"SHADOW_MODE", "false", "`--shadow-mode`: every limit in shadow mode (counted, never denying)", direct("shadow-mode", "bool")},
	{"QUOTA_MODE", "false", "`false` as Sluice; `true` warned (set `quota_mode: true` on the rules)",
		warnedUnless(isFalse, "Sluice has no global quota mode; set quota_mode: true on the rules that need it")},
	{"RESPONSE_DYNAMIC_METADATA", "false", "`--dynamic-metadata` (its content differs: see below)", direct("dynamic-metadata", "bool")},
	{"MERGE_DOMAIN_CONFIG", "false", "`false` as Sluice; `true` warned (the same domain in two files is an error: merge the files)",
		warnedUnless(isFalse, "Sluice does not merge domains: the same domain in two files is a config error (merge the files)")},
	{"TRACING_ENABLED", "false", "`--tracing-enabled`", direct("tracing-enabled", "bool")},
	{"TRACING_SERVICE_NAME", "RateLimit", "`--tracing-service-name` (Sluice's default: `sluice`)", direct("tracing-service-name", "")},
	{"TRACING_SERVICE_NAMESPACE", "", "`--tracing-service-namespace`", direct("tracing-service-namespace", "")},
	{"TRACING_SERVICE_INSTANCE_ID", "", "`--tracing-service-instance-id`", direct("tracing-service-instance-id", "")},
	{"TRACING_EXPORTER_PROTOCOL", "http", "`--tracing-exporter-protocol`", direct("tracing-exporter-protocol", "")},
	{"TRACING_SAMPLING_RATE", "1", "`--tracing-sampling-rate`", direct("tracing-sampling-rate", "float")},
}
