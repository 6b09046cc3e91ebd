package settings

import (
	"strconv"
)

// envoyproxy/ratelimit's settings of its xDS config client
// (CONFIG_GRPC_XDS_*, XDS_CLIENT_*), read with CONFIG_TYPE=GRPC_XDS_SOTW
// as part of the peer layer (peerenv.go): configType calls peerXDS, and
// the variables' own entries of peerVars (xdsVar) warn about them only
// when CONFIG_TYPE is not GRPC_XDS_SOTW, as the peer reads them only then.

// The peer's defaults for the settings it reads only with
// CONFIG_TYPE=GRPC_XDS_SOTW; Sluice's own differ (node id "sluice", and no
// server: files).
const (
	peerXDSServerDefault = "localhost:18000"
	peerXDSNodeDefault   = "default"
)

// peerXDSVars maps each of the peer's xDS variables that sets one Sluice
// flag to that flag and the kind its value must parse as (checkKind).
var peerXDSVars = []struct{ name, flag, kind string }{
	{"CONFIG_GRPC_XDS_NODE_METADATA", "xds-node-metadata", ""},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "xds-headers", ""},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "xds-backoff-initial", "duration"},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "xds-backoff-max", "duration"},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "xds-max-msg-bytes", "int"},
}

// peerXDSTLSVars are the peer's xDS TLS files, read only with
// CONFIG_GRPC_XDS_SERVER_USE_TLS=true, as the peer does.
var peerXDSTLSVars = []struct{ name, flag string }{
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "xds-tls-cert"},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "xds-tls-key"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "xds-tls-ca"},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds-tls-server-name"},
}

// peerXDS maps the xDS client's settings onto the --xds-* flags, for
// CONFIG_TYPE=GRPC_XDS_SOTW: the server and node id always (the peer's
// defaults when unset), the rest when set. It returns an error naming the
// variable for a value that does not parse.
func peerXDS(p *peerEnv) error {
	p.set("xds-server", p.getOr("CONFIG_GRPC_XDS_SERVER_URL", peerXDSServerDefault), "CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL")
	p.set("xds-node-id", p.getOr("CONFIG_GRPC_XDS_NODE_ID", peerXDSNodeDefault), "CONFIG_TYPE", "CONFIG_GRPC_XDS_NODE_ID")
	for _, pv := range peerXDSVars {
		if v := p.get(pv.name); v != "" {
			if err := checkKind(pv.name, v, pv.kind); err != nil {
				return err
			}
			p.set(pv.flag, v, pv.name)
		}
	}
	if err := peerXDSBackoffJitter(p); err != nil {
		return err
	}
	if v := p.get("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"); v != "" {
		p.warn("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", v, "not used: connection attempts follow the XDS_CLIENT_BACKOFF_* backoff")
	}
	useTLS := p.get("CONFIG_GRPC_XDS_SERVER_USE_TLS")
	if useTLS != "" {
		if err := checkKind("CONFIG_GRPC_XDS_SERVER_USE_TLS", useTLS, "bool"); err != nil {
			return err
		}
	}
	if isTrue(useTLS) {
		p.set("xds-tls", "true", "CONFIG_GRPC_XDS_SERVER_USE_TLS")
	}
	for _, pv := range peerXDSTLSVars {
		switch v := p.get(pv.name); {
		case v == "":
		case isTrue(useTLS):
			p.set(pv.flag, v, "CONFIG_GRPC_XDS_SERVER_USE_TLS", pv.name)
		default:
			p.warn(pv.name, v, "not used: CONFIG_GRPC_XDS_SERVER_USE_TLS is not true, so the xDS connection is plaintext (as in envoyproxy/ratelimit)")
		}
	}
	return nil
}

// peerXDSBackoffJitter maps XDS_CLIENT_BACKOFF_RANDOM_FACTOR and
// XDS_CLIENT_BACKOFF_JITTER (false: no jitter) onto --xds-backoff-jitter.
func peerXDSBackoffJitter(p *peerEnv) error {
	if v := p.get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"); v != "" {
		if err := checkKind("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", v, "float"); err != nil {
			return err
		}
		p.set("xds-backoff-jitter", v, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR")
	}
	if v := p.get("XDS_CLIENT_BACKOFF_JITTER"); v != "" {
		if err := checkKind("XDS_CLIENT_BACKOFF_JITTER", v, "bool"); err != nil {
			return err
		}
		if isFalse(v) {
			p.set("xds-backoff-jitter", "0", "XDS_CLIENT_BACKOFF_JITTER")
		}
	}
	return nil
}

// forceStart maps FORCE_START_WITHOUT_INITIAL_CONFIG onto
// --start-without-config.
func forceStart(p *peerEnv, name, v string) error {
	if err := checkKind(name, v, "bool"); err != nil {
		return err
	}
	b, _ := strconv.ParseBool(v)
	p.set("start-without-config", strconv.FormatBool(b), name)
	return nil
}
