package settings

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// istioEnv is the env of Istio's sample rate limit Deployment.
var istioEnv = map[string]string{"LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false",
	"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
	"HOST": "::", "GRPC_HOST": "::"}

// TestReportCreditsWhatDecided: each of the peer's RUNTIME_* variables is
// credited only on the settings it decided, and RUNTIME_WATCH_ROOT, which
// decides none, only in a note.
func TestReportCreditsWhatDecided(t *testing.T) {
	s, err := Parse(nil, envOf(istioEnv), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	peer := s.Report().Peer
	for _, want := range []string{
		"--config-dotfiles=false (RUNTIME_IGNOREDOTFILES)",
		"--config-tree=true (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY)",
		"--config=/data/ratelimit/config (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY)",
		"RUNTIME_WATCH_ROOT=false: Sluice watches the config directory and the one holding it either way (edits and symlink swaps)",
	} {
		if !slices.Contains(peer, want) {
			t.Errorf("start-up line of the peer's settings lacks %q:\n%s", want, strings.Join(peer, "\n"))
		}
	}
	if got := strings.Join(peer, "\n"); strings.Count(got, "RUNTIME_WATCH_ROOT") != 1 {
		t.Errorf("RUNTIME_WATCH_ROOT is credited on a setting:\n%s", got)
	}
}

// TestReportXDSHasNoFileLayout: with the config over xDS (Envoy Gateway's
// env, which also sets the peer's file layout), no --config, --config-tree
// or --config-dotfiles line is reported as applied, nor in force: their
// variables are warned as not used.
func TestReportXDSHasNoFileLayout(t *testing.T) {
	env := map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false"}
	for k, v := range egEnv {
		env[k] = v
	}
	s, err := Parse(nil, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Report()
	for _, line := range r.Peer {
		if strings.HasPrefix(line, "--config") || strings.Contains(line, "RUNTIME_") {
			t.Errorf("applied with the config over xDS: %q", line)
		}
	}
	for _, in := range s.InForce() {
		if strings.HasPrefix(in.Name, "config") {
			t.Errorf("in force with the config over xDS: %+v", in)
		}
	}
	for _, v := range []string{"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false"} {
		want := v + ": not used: the config comes over xDS (--xds-server), not from files"
		if !slices.Contains(r.PeerWarnings, want) {
			t.Errorf("warnings lack %q: %q", want, r.PeerWarnings)
		}
	}
	if !slices.ContainsFunc(s.InForce(), func(in InForce) bool {
		return in.Name == "xds-node-id" && in.Value == "envoy-ratelimit" && slices.Equal(in.From, []string{"CONFIG_TYPE", "CONFIG_GRPC_XDS_NODE_ID"})
	}) {
		t.Errorf("in force %+v: want --xds-node-id=envoy-ratelimit from CONFIG_TYPE, CONFIG_GRPC_XDS_NODE_ID", s.InForce())
	}
}

// TestReportChanged: every setting that a flag or a SLUICE_* variable sets
// to other than its default is reported, naming what set it, with secrets
// hidden; a setting given its default, or one of a config source not in
// use, is not.
func TestReportChanged(t *testing.T) {
	env := map[string]string{"SLUICE_OVERDRAW": "true", "SLUICE_REDIS_URL": "redis://u:secret@h:6379/0", "SLUICE_XDS_NODE_ID": "x",
		"SLUICE_LOG_LEVEL": "INFO"}
	s, err := Parse([]string{"--shadow-mode", "--grpc-addr", ":8081", "--store-timeout", "20ms"}, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--redis-url=redis://u:xxxxx@h:6379/0 (SLUICE_REDIS_URL)", "--shadow-mode=true (--shadow-mode)",
		"--overdraw=true (SLUICE_OVERDRAW)", "--store-timeout=20ms (--store-timeout)"}
	if got := s.Report().Changed; !slices.Equal(got, want) {
		t.Errorf("changed =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s, err = Parse(nil, envOf(nil), io.Discard); err != nil || len(s.Report().Changed) > 0 || len(s.InForce()) > 0 {
		t.Errorf("defaults: changed %q, in force %v, %v; want none", s.Report().Changed, s.InForce(), err)
	}
}
