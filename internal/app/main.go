package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sluicehq/sluice/internal/settings"
	"github.com/sluicehq/sluice/internal/version"
	"github.com/sluicehq/sluice/pkg/descriptors"
)

// Main runs one invocation of the sluice command with args (without the
// program name) and environ (as os.Environ returns it), and returns the
// process exit code: 0 on success or a clean shutdown (ctx ended), 1 on a
// runtime failure or an invalid config, 2 on bad usage. Help goes to
// stdout, logs and errors to stderr. Unless environ sets GOGC, it sets the
// garbage collector's target to defaultGCPercent.
func Main(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	if env["GOGC"] == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	return cli(ctx, args, environ, func(k string) string { return env[k] }, stdout, stderr)
}

// defaultGCPercent is the garbage collector's target when GOGC is unset:
// the heap grows to five times what is live before a collection, instead of
// Go's twice. A decision allocates a few hundred short-lived bytes and the
// live heap is a few MB, so collections cost more CPU than the memory they
// save: at 64 callers on Redis this cut the service's CPU per decision by
// about 15% (bench/peer-compare.sh, BENCHMARKS.md). GOGC and GOMEMLIMIT, when
// set, rule as usual.
const defaultGCPercent = 400

// versionString is the version the binary reports (--version, /config,
// the status page, the spans); internal/version says where it comes from.
func versionString() string { return version.String() }

// cli runs one invocation and returns the process exit code: 0 on success or
// a clean shutdown, 1 on a runtime failure or an invalid config, 2 on bad
// usage. Help goes to stdout, errors to stderr.
func cli(ctx context.Context, args, environ []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "check":
			return check(args[1:], stdout, stderr)
		case "tenants":
			return tenantsCmd(ctx, args[1:], getenv, stdout, stderr) // tenantscmd.go
		case "version":
			fmt.Fprintf(stdout, "sluice %s\n", versionString())
			return 0
		case "help":
			args = []string{"--help"}
		}
	}
	s, err := settings.Parse(args, getenv, stdout, settings.EmptyEnv(environ)...)
	if err != nil {
		if errors.Is(err, settings.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	if s.Version {
		fmt.Fprintf(stdout, "sluice %s\n", versionString())
		return 0
	}
	log, err := newLogger(s, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	defer log.Sync()
	logSettings(log, s, environ)

	srv, err := newServer(s, log, hooks{})
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}
	if err := srv.serve(ctx); err != nil {
		log.Error("server failed", zap.Error(err))
		return 1
	}
	return 0
}

// checkUsage is the help of the check subcommand.
const checkUsage = `usage: sluice check PATH...
       sluice check --config-tree [--config-dotfiles] DIR...
       sluice check --overlay OVERLAY PATH...

Loads the descriptor configs at each PATH (a YAML file, or a directory of
*.yaml and *.yml files; with --config-tree every file below the directory,
as the server's --config-tree loads it) as the server would, with the
policy overlay OVERLAY (a file or directory) applied if given, prints every
error as file:line:col: path: message and every warning, and exits 1 if
there was an error, 0 if not (2 on bad usage). It needs no Redis and binds
no port.
`

// check validates the configs at args' paths, selected as its flags say,
// prints every error and warning, and returns the exit code.
func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	tree := fs.Bool("config-tree", false, "")
	overlay := fs.String("overlay", "", "")
	dotfiles := fs.Bool("config-dotfiles", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, checkUsage)
			return 0
		}
		fmt.Fprintf(stderr, "sluice check: %v\n%s", err, checkUsage)
		return 2
	}
	paths := fs.Args()
	if len(paths) == 0 {
		fmt.Fprint(stderr, checkUsage)
		return 2
	}
	sel := descriptors.YAMLFiles
	if *tree {
		sel = descriptors.Selection{Recursive: true, Dotfiles: *dotfiles}
	}
	cfg, err := sel.Load(paths...)
	if err == nil && *overlay != "" {
		cfg, err = checkOverlay(cfg, *overlay)
	}
	if err != nil {
		for _, e := range unjoin(err) {
			fmt.Fprintf(stderr, "%v\n", e)
		}
		return 1
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	fmt.Fprintf(stdout, "ok: %s in %s\n", plural(len(cfg.Domains()), "domain"), plural(len(cfg.Files), "file"))
	return 0
}

// checkOverlay applies the overlay at path to cfg, as the server would.
func checkOverlay(cfg *descriptors.Config, path string) (*descriptors.Config, error) {
	ov, err := descriptors.YAMLFiles.LoadOverlay(path)
	if err != nil {
		return nil, err
	}
	return (&descriptors.Policy{Overlay: ov}).Rebuild(cfg)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// unjoin splits an errors.Join into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// logSettings logs, once at start, what envoyproxy/ratelimit's variables
// set (info), the ones Sluice does not apply with what it does instead (one
// warning line), what the flags and SLUICE_* variables changed from the
// default (info), how hits count (info), and SLUICE_* variables that are no
// setting (one warning line).
func logSettings(log *zap.Logger, s *settings.Settings, environ []string) {
	r := s.Report()
	if len(r.Peer) > 0 {
		log.Info("envoyproxy/ratelimit settings applied", zap.Strings("settings", r.Peer))
	}
	if len(r.PeerWarnings) > 0 {
		log.Warn("envoyproxy/ratelimit settings that Sluice does not apply, and what it does instead", zap.Strings("settings", r.PeerWarnings))
	}
	if len(r.Changed) > 0 {
		log.Info("settings changed from the default", zap.Strings("settings", r.Changed))
	}
	log.Info("counting in force", zap.String("counting", r.Counting))
	log.Info("defaults of the rules that set none", zap.String("defaults", s.DefaultsInForce()), zap.String("overlay", s.Overlay))
	if w := settings.UnknownEnv(environ); len(w) > 0 {
		log.Warn("unknown SLUICE_* variables", zap.Strings("variables", w))
	}
}

// newLogger builds the process logger: JSON, or console on a terminal when
// --log-format=auto.
func newLogger(s *settings.Settings, stderr io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(s.LogLevel)
	if err != nil {
		return nil, err
	}
	format := s.LogFormat
	if format == "auto" {
		format = "json"
		if f, ok := stderr.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				format = "console"
			}
		}
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	ec.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	if format == "console" {
		ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	} else {
		enc = zapcore.NewJSONEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(stderr), lvl)), nil
}
