package app

import (
	"bufio"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/tenants"
)

// maxImportBytes bounds an import's body: a million rows of a 40-byte
// value and a plan's name are about 50 MB.
const maxImportBytes = 512 << 20

// admin is the tenant admin API (--admin-addr): the tables' rows read and
// written over HTTP, every call authenticated by a bearer token of
// --admin-tokens, every change logged with the token's name, and every
// row checked against the config in force before anything is written.
type admin struct {
	src    tenants.Source
	w      tenants.Writer
	tokens []adminToken
	config func() *descriptors.Config
	log    *zap.Logger
}

// adminToken is one line of --admin-tokens.
type adminToken struct {
	name   string
	secret []byte
}

// readTokens reads a token file: one "NAME TOKEN" per line; blank lines
// and lines starting with '#' are skipped. It refuses a file without
// tokens, and a token shorter than 16 bytes.
func readTokens(path string) ([]adminToken, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []adminToken
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, secret, ok := strings.Cut(text, " ")
		secret = strings.TrimSpace(secret)
		if !ok || name == "" || len(secret) < 16 {
			return nil, fmt.Errorf("%s:%d: want NAME TOKEN, the token at least 16 bytes", path, line)
		}
		out = append(out, adminToken{name, []byte(secret)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no tokens", path)
	}
	return out, nil
}

// caller returns the name of the token r bears, "" when it bears none of
// them. Every token is compared, in constant time, whatever matches.
func (a *admin) caller(r *http.Request) string {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	name := ""
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare([]byte(got), t.secret) == 1 {
			name = t.name
		}
	}
	return name
}

func (a *admin) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tenants/{table}", a.list)
	mux.HandleFunc("GET /v1/tenants/{table}/{value}", a.get)
	mux.HandleFunc("PUT /v1/tenants/{table}/{value}", a.set)
	mux.HandleFunc("DELETE /v1/tenants/{table}/{value}", a.delete)
	mux.HandleFunc("POST /v1/tenants/{table}/import", a.importRows)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.caller(r) == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-admin"`)
			http.Error(w, "missing or unknown bearer token", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// refuse answers 400 with err's message, which names what is wrong.
func refuse(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
}

func (a *admin) get(w http.ResponseWriter, r *http.Request) {
	table, value := r.PathValue("table"), r.PathValue("value")
	row, ok, err := a.src.Row(r.Context(), table, value)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case !ok:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("table %q has no row for %q: it is on the default plan", table, value)})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"table": table, "value": value, "row": row})
	}
}

func (a *admin) list(w http.ResponseWriter, r *http.Request) {
	rows := map[string]string{}
	err := a.w.List(r.Context(), r.PathValue("table"), func(v, row string) bool { rows[v] = row; return true })
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, http.StatusOK, rows)
}

func (a *admin) set(w http.ResponseWriter, r *http.Request) {
	table, value := r.PathValue("table"), r.PathValue("value")
	var body struct {
		Row string `json:"row"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		refuse(w, fmt.Errorf("body: want {\"row\": \"PLAN or LIMITS\"}: %w", err))
		return
	}
	if err := tenants.Check(a.config(), table, value, body.Row); err != nil {
		refuse(w, err)
		return
	}
	if err := a.w.Set(r.Context(), table, map[string]string{value: body.Row}); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	a.log.Info("tenant row set", zap.String("token", a.caller(r)), zap.String("table", table), zap.String("value", value), zap.String("row", body.Row))
	writeJSON(w, http.StatusOK, map[string]string{"table": table, "value": value, "row": body.Row})
}

func (a *admin) delete(w http.ResponseWriter, r *http.Request) {
	table, value := r.PathValue("table"), r.PathValue("value")
	if !descriptors.ValidTableName(table) {
		refuse(w, fmt.Errorf("table %q: want 1 to 64 letters, digits, '_', '.' or '-'", table))
		return
	}
	if err := a.w.Delete(r.Context(), table, value); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	a.log.Info("tenant row deleted", zap.String("token", a.caller(r)), zap.String("table", table), zap.String("value", value))
	w.WriteHeader(http.StatusNoContent)
}

// importRows writes every row of the body (CSV, or YAML with
// ?format=yaml) once every one of them checks; else nothing.
func (a *admin) importRows(w http.ResponseWriter, r *http.Request) {
	table, format := r.PathValue("table"), r.URL.Query().Get("format")
	if format == "" {
		format = "csv"
	}
	rows, err := tenants.ReadRows(http.MaxBytesReader(w, r.Body, maxImportBytes), format)
	if err == nil {
		err = tenants.CheckAll(a.config(), table, rows)
	}
	if err != nil {
		refuse(w, fmt.Errorf("nothing imported: %w", err))
		return
	}
	if err := a.w.Import(r.Context(), table, rows); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	a.log.Info("tenant rows imported", zap.String("token", a.caller(r)), zap.String("table", table), zap.Int("rows", len(rows)))
	writeJSON(w, http.StatusOK, map[string]any{"table": table, "imported": len(rows)})
}
