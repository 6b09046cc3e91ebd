package app

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/internal/statuspage"
	"github.com/sluicehq/sluice/pkg/ratelimit"
)

// newStatusPage creates the status page's recorder when --ui is on (nil
// otherwise); compose makes it an observer of the store's calls.
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
		Now:            srv.hooks.now,
	})
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
			if err := srv.store.ping(ctx); err != nil {
				if t := srv.core.LocalSince(); !t.IsZero() {
					return fmt.Sprintf("store unreachable: %v; deciding locally (failure mode local) since %s, %d local decisions so far",
						err, t.UTC().Format(time.RFC3339), srv.store.local.Decided())
				}
				return "store unreachable: " + err.Error()
			}
			return ""
		},
		StoreKind: srv.store.kind,
		Version:   versionString(),
	})
	mux.Handle("GET /ui", h)
	mux.Handle("GET /ui/", h)
}
