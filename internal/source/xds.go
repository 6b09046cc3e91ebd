package source

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/pkg/xdsconfig"
)

// xdsSource is the config over xDS: --xds-server's RateLimitConfig
// resources, as Envoy Gateway serves them (pkg/xdsconfig).
type xdsSource struct {
	client *xdsconfig.Client
	log    *zap.Logger
}

var _ Source = (*xdsSource)(nil)

// newXDSSource returns the xDS source of x, with its metrics on reg. It
// reads the TLS files once, so that a missing or bad file stops the start
// (later connection attempts read them again).
func newXDSSource(x *settings.XDSSettings, reg prometheus.Registerer, log *zap.Logger) (*xdsSource, error) {
	opts := x.Options()
	if opts.TLS != nil {
		if _, err := opts.TLS(); err != nil {
			return nil, err
		}
	}
	m, err := xdsconfig.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	opts.Metrics, opts.Logger = m, log.Named("xds")
	c, err := xdsconfig.New(opts)
	if err != nil {
		return nil, fmt.Errorf("--xds-server: %w", err)
	}
	return &xdsSource{client: c, log: log}, nil
}

// Load delivers nothing: the config arrives once Run has subscribed. It
// logs where it will come from.
func (x *xdsSource) Load(Deliver) bool {
	x.log.Info("config from xDS", x.Info().Fields()...)
	return false
}

// Run subscribes until ctx ends, delivering each new outcome.
func (x *xdsSource) Run(ctx context.Context, deliver Deliver) error {
	return x.client.Run(ctx, deliver)
}

// Info describes the subscription: server, node id, connection and
// versions.
func (x *xdsSource) Info() Info {
	st := x.client.Status()
	return Info{Kind: "xds", Server: st.Server, NodeID: st.NodeID, Connected: &st.Connected,
		Version: st.Version, RefusedVersion: st.RefusedVersion}
}
