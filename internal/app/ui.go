package app

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/internal/statuspage"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// storeKind names the store: "redis" or "memory".
func (srv *server) storeKind() string {
	if srv.ping != nil {
		return "redis"
	}
	return "memory"
}

// newStatusPage creates the status page's recorder when --ui is on (nil
// otherwise) and wraps the store so the page sees its calls.
func (srv *server) newStatusPage() {
	s := srv.set
	if !s.UI {
		return
	}
	top := s.UITopValues
	if top == 0 {
		top = -1 // 0 in the setting turns values off; 0 in Options means the default
	}
	srv.status = statuspage.NewRecorder(statuspage.Options{
		TopValues:      top,
		Sensitive:      settings.SplitList(s.UISensitive),
		NearLimitRatio: s.NearLimit(),
	})
	srv.store = srv.status.WrapStore(srv.store)
}

// observers are the decision observers besides the metrics.
func (srv *server) observers() []ratelimit.Observer {
	if srv.status == nil {
		return nil
	}
	return []ratelimit.Observer{srv.status}
}

// handleUI adds /ui and /ui/api to mux when the status page is on.
func (srv *server) handleUI(mux *http.ServeMux) {
	if srv.status == nil {
		return
	}
	h := statuspage.Handler(srv.status, statuspage.Sources{
		Config:       srv.core.Config,
		ConfigStatus: srv.page.pageStatus,
		Health: func(ctx context.Context) string {
			if srv.ping == nil {
				return ""
			}
			if err := srv.ping(ctx); err != nil {
				return "store unreachable: " + err.Error()
			}
			return ""
		},
		StoreKind: srv.storeKind(),
		Version:   versionString(),
	})
	mux.Handle("GET /ui", h)
	mux.Handle("GET /ui/", h)
}
