package settings

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/pkg/xdsconfig"
)

// XDSSettings are the flags of the xDS config source (internal/source).
// --xds-server turns it on instead of --config.
type XDSSettings struct {
	Server         string
	NodeID         string
	NodeMetadata   string
	Headers        string
	TLS            bool
	TLSCA          string
	TLSCert        string
	TLSKey         string
	TLSServerName  string
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	BackoffJitter  string
	MaxMsgBytes    int
}

// table lists the xDS flags, appended to the settings table.
func (x *XDSSettings) table() []setting {
	return []setting{
		{"xds-server", "xDS server (host:port) to load the config from instead of --config: a SotW ADS subscription to RateLimitConfig resources, as Envoy Gateway serves them", "", &x.Server},
		{"xds-node-id", "node id sent to the xDS server, which picks the config by it (Envoy Gateway serves envoy-ratelimit)", "sluice", &x.NodeID},
		{"xds-node-metadata", "node metadata sent to the xDS server: comma-separated key=value pairs", "", &x.NodeMetadata},
		{"xds-headers", "gRPC metadata sent on the xDS stream: comma-separated key:value pairs", "", &x.Headers},
		{"xds-tls", "TLS to the xDS server (also on when any --xds-tls-* is set)", "false", &x.TLS},
		{"xds-tls-ca", "PEM CAs the xDS server's certificate must chain to (default: system roots)", "", &x.TLSCA},
		{"xds-tls-cert", "PEM client certificate for the xDS server (with --xds-tls-key; Envoy Gateway requires one)", "", &x.TLSCert},
		{"xds-tls-key", "PEM private key of --xds-tls-cert", "", &x.TLSKey},
		{"xds-tls-server-name", "name the xDS server's certificate must hold (default: the host of --xds-server)", "", &x.TLSServerName},
		{"xds-backoff-initial", "first wait before reconnecting to the xDS server; doubles up to --xds-backoff-max", durationText(xdsconfig.DefaultBackoffInitial), &x.BackoffInitial},
		{"xds-backoff-max", "longest wait between two xDS connection attempts (before jitter)", durationText(xdsconfig.DefaultBackoffMax), &x.BackoffMax},
		{"xds-backoff-jitter", "spread of each wait, from 0 to 1: 0.5 waits 50% to 150% of the step", "0.5", &x.BackoffJitter},
		{"xds-max-msg-bytes", "largest xDS response accepted, in bytes", "4194304", &x.MaxMsgBytes},
	}
}

// validate checks the xDS flags when --xds-server is set.
func (x *XDSSettings) validate() error {
	if x.Server == "" {
		return nil
	}
	if x.NodeID == "" {
		return errors.New("--xds-node-id: empty (the xDS server picks the config by it)")
	}
	if _, err := pairs(x.NodeMetadata, "="); err != nil {
		return fmt.Errorf("--xds-node-metadata: %w", err)
	}
	if _, err := pairs(x.Headers, ":"); err != nil {
		return fmt.Errorf("--xds-headers: %w", err)
	}
	if (x.TLSCert == "") != (x.TLSKey == "") {
		return errors.New("--xds-tls-cert and --xds-tls-key: set both or neither")
	}
	if j, err := strconv.ParseFloat(x.BackoffJitter, 64); err != nil || j < 0 || j > 1 {
		return fmt.Errorf("--xds-backoff-jitter: %q is not a number from 0 to 1", x.BackoffJitter)
	}
	if x.BackoffInitial < time.Millisecond || x.BackoffMax < x.BackoffInitial {
		return fmt.Errorf("--xds-backoff-initial %v and --xds-backoff-max %v: want 1ms or more, and max at least initial", x.BackoffInitial, x.BackoffMax)
	}
	if x.MaxMsgBytes < 1 {
		return fmt.Errorf("--xds-max-msg-bytes: %d must be at least 1", x.MaxMsgBytes)
	}
	return nil
}

// pairs parses "k<sep>v,k<sep>v" (spaces around items ignored) into a
// map; an item without sep or with an empty key is an error.
func pairs(v, sep string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range SplitList(v) {
		k, val, ok := strings.Cut(item, sep)
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key%svalue", item, sep)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return out, nil
}

// tlsOn reports whether the xDS connection uses TLS.
func (x *XDSSettings) tlsOn() bool {
	return x.TLS || x.TLSCA != "" || x.TLSCert != "" || x.TLSServerName != ""
}

// tlsConfig returns the function that builds the TLS of one xDS
// connection attempt, reading the files again each time (certificates
// rotated on disk are picked up at the next reconnection); nil when TLS is
// off.
func (x *XDSSettings) tlsConfig() func() (*tls.Config, error) {
	if !x.tlsOn() {
		return nil
	}
	return func() (*tls.Config, error) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.TLSServerName}
		if x.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(x.TLSCert, x.TLSKey)
			if err != nil {
				return nil, fmt.Errorf("--xds-tls-cert/--xds-tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		if x.TLSCA != "" {
			pem, err := os.ReadFile(x.TLSCA)
			if err != nil {
				return nil, fmt.Errorf("--xds-tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--xds-tls-ca: no PEM certificate in %s", x.TLSCA)
			}
		}
		return cfg, nil
	}
}

// Options returns the xdsconfig.Options of the settings (validated): no
// Metrics and no Logger, which the source sets.
func (x *XDSSettings) Options() xdsconfig.Options {
	meta, _ := pairs(x.NodeMetadata, "=")
	fields := make(map[string]*structpb.Value, len(meta))
	for k, v := range meta {
		fields[k] = structpb.NewStringValue(v)
	}
	headers, _ := pairs(x.Headers, ":")
	jitter, _ := strconv.ParseFloat(x.BackoffJitter, 64)
	return xdsconfig.Options{
		Server:          x.Server,
		Node:            &corev3.Node{Id: x.NodeID, Metadata: &structpb.Struct{Fields: fields}, UserAgentName: "sluice"},
		Headers:         headers,
		TLS:             x.tlsConfig(),
		Backoff:         xdsconfig.Backoff{Initial: x.BackoffInitial, Max: x.BackoffMax, Jitter: jitter},
		MaxRecvMsgBytes: x.MaxMsgBytes,
	}
}
