package redis

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// luaFiles holds the script's parts (lua/header.lua says what each does).
//
//go:embed lua/*.lua lua/run/*.lua
var luaFiles embed.FS

// scriptBody is the limiter script: luaProtocol, then lua/header.lua, the
// algorithms' files (the rest of lua/*.lua) in name order and the call's
// path (lua/run/*.lua: call.lua, general.lua, run.lua) in name order,
// joined at build time into one chunk (each part's locals are seen by the
// parts after it).
var scriptBody = joinScript()

// joinScript joins the script's parts.
func joinScript() string {
	algorithms, err := fs.Glob(luaFiles, "lua/*.lua")
	if err != nil {
		panic("redis: " + err.Error()) // the pattern is valid
	}
	path, err := fs.Glob(luaFiles, "lua/run/*.lua")
	if err != nil {
		panic("redis: " + err.Error()) // the pattern is valid
	}
	parts := []string{"lua/header.lua"}
	for _, f := range algorithms {
		if f != "lua/header.lua" {
			parts = append(parts, f) // fs.Glob sorts by name
		}
	}
	var b strings.Builder
	b.WriteString(luaProtocol())
	for _, f := range append(parts, path...) {
		src, err := luaFiles.ReadFile(f)
		if err != nil {
			panic("redis: the limiter script's part " + f + " is missing: " + err.Error()) // a build without it
		}
		b.WriteString("\n")
		b.Write(src)
	}
	return b.String()
}

// The limiter script reaches Redis in one of two forms (lua/header.lua): a function library, loaded once per node with FUNCTION LOAD and
// called with FCALL (Redis 7 and later), whose helper functions are then
// created once instead of on every call; or a script run with EVALSHA (EVAL
// on NOSCRIPT), for a Redis without functions or a user refused them. The
// library and its function are named after a digest of the script, so two
// versions of Sluice sharing a Redis during a rolling upgrade each call
// their own.
var (
	libName    = "sluice_" + digest(scriptBody)
	libSource  = "#!lua name=" + libName + "\n" + scriptBody + "\nredis.register_function('" + libName + "', run)\n"
	evalScript = goredis.NewScript(scriptBody + "\nreturn run(KEYS, ARGV)\n")
)

func digest(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// How a Store calls the script: not known yet (the first call or Warm
// tries FUNCTION LOAD), by FCALL, or by EVALSHA.
const (
	modeUnknown int32 = iota
	modeFunction
	modeEval
)

// caller calls the limiter script on one Redis node or client, as a
// function when the server takes one and as a script otherwise. It is safe
// for concurrent use.
type caller struct {
	mode atomic.Int32
}

// scriptClient is what caller needs of a go-redis client: a node's
// *goredis.Client, or the Store's client on a standalone or Sentinel Redis.
type scriptClient interface {
	goredis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *goredis.Cmd
	FunctionLoad(ctx context.Context, code string) *goredis.StringCmd
	Pipeline() goredis.Pipeliner
}

// load loads the library on c when the mode is not decided or is function,
// and decides the mode: function when the library is there, eval when the
// server refuses FUNCTION (an older Redis, an ACL). A network error decides
// nothing and is returned.
func (k *caller) load(ctx context.Context, c scriptClient) error {
	if k.mode.Load() == modeEval {
		return evalScript.Load(ctx, c).Err()
	}
	err := c.FunctionLoad(ctx, libSource).Err()
	switch {
	case err == nil || isReply(err) && strings.Contains(err.Error(), "already exists"):
		k.mode.Store(modeFunction)
		return nil
	case isReply(err):
		// ERR unknown command, NOPERM, ...: run it as a script.
		k.mode.Store(modeEval)
		return evalScript.Load(ctx, c).Err()
	}
	return err
}

// queue adds one script call to pipe and returns its Cmd. The mode must be
// decided (load).
func (k *caller) queue(ctx context.Context, pipe goredis.Pipeliner, keys []string, args []any) *goredis.Cmd {
	if k.mode.Load() == modeFunction {
		return pipe.FCall(ctx, libName, keys, args...)
	}
	return pipe.EvalSha(ctx, evalScript.Hash(), keys, args...)
}

// run makes one script call on c. A call the server answers with "no such
// function" or NOSCRIPT did not run: the library (or script) is loaded and
// the call sent again; no call that may have run is ever sent twice.
func (k *caller) run(ctx context.Context, c scriptClient, keys []string, args []any) *goredis.Cmd {
	if k.mode.Load() == modeUnknown {
		if err := k.load(ctx, c); err != nil {
			cmd := goredis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd
		}
	}
	if k.mode.Load() == modeEval {
		return evalScript.Run(ctx, c, keys, args...)
	}
	cmd := c.FCall(ctx, libName, keys, args...)
	if notLoaded(cmd.Err()) {
		if err := k.load(ctx, c); err != nil {
			cmd.SetErr(err)
			return cmd
		}
		return k.run(ctx, c, keys, args)
	}
	return cmd
}

// notLoaded reports an error reply saying that the function or script is
// not on the server (a restarted Redis, a flush, a failover to a node that
// never had it): the call did not run.
func notLoaded(err error) bool {
	return err != nil && (goredis.HasErrorPrefix(err, "NOSCRIPT") ||
		isReply(err) && strings.Contains(err.Error(), "Function not found"))
}

// luaProtocol is the script's first part: layout's constants as Lua
// locals, and ALGORITHMS, limiter's registry as the script needs it (each
// algorithm's number and whether it leases, by config spelling), under
// which each algorithm's file registers itself.
func luaProtocol() string {
	var b strings.Builder
	b.WriteString("-- The protocol, written by protocol.go from its layout table: do not edit.\n")
	for _, c := range layout {
		switch v := c.value.(type) {
		case string:
			fmt.Fprintf(&b, "local %s = '%s'\n", c.lua, v)
		default:
			fmt.Fprintf(&b, "local %s = %d\n", c.lua, v)
		}
	}
	b.WriteString("local ALGORITHMS = {\n")
	for _, a := range limiter.Algorithms() {
		t := a.Traits()
		fmt.Fprintf(&b, "  %s = { number = %d, lease = %t },\n", t.Name, a, t.Lease)
	}
	b.WriteString("}\n")
	fmt.Fprintf(&b, "local NALGORITHMS = %d\n", len(limiter.Algorithms()))
	return b.String()
}
