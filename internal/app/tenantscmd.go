package app

import (
	"cmp"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/descriptors"
	"github.com/sluicehq/sluice/pkg/redis"
	"github.com/sluicehq/sluice/pkg/tenants"
)

// tenantsUsage is the help of the tenants subcommand.
const tenantsUsage = `usage: sluice tenants [flags] set TABLE VALUE ROW
       sluice tenants [flags] get TABLE VALUE
       sluice tenants [flags] delete TABLE VALUE...
       sluice tenants [flags] list TABLE
       sluice tenants [flags] import TABLE FILE   (CSV "value,row" lines, or YAML value: row; - is stdin)

Reads and writes the tenant tables that rules name with tenants_from, in
Redis (--redis-url) or in --tenants-file. A ROW is a plan's name (pro) or
limits of the value's own (50000/minute, or 10/second,1000000/month).
set and import check every row against --config first (a table no rule
names, an unknown plan, a limit without a unit, a value over 256 bytes):
one bad row and nothing is written. Every instance sees a change within
about a second.

flags (each also SLUICE_ and its name in upper case, as for the server):
`

// tenantsCmd runs `sluice tenants` and returns the exit code: 0, 1 when the
// table cannot be reached or a row is refused, 2 on bad usage.
func tenantsCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenants", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", cmp.Or(getenv("SLUICE_CONFIG"), "config"), "the descriptor config the rows are checked against")
	url := fs.String("redis-url", getenv("SLUICE_REDIS_URL"), "Redis URL of the tables")
	prefix := fs.String("redis-prefix", cmp.Or(getenv("SLUICE_REDIS_PREFIX"), redis.DefaultPrefix), "prefix of Sluice's Redis keys")
	file := fs.String("tenants-file", getenv("SLUICE_TENANTS_FILE"), "the tables' YAML file, for the in-memory store")
	format := fs.String("format", "", "import: csv or yaml (default: by the file's extension, else csv)")
	fs.Usage = func() { fmt.Fprint(stderr, tenantsUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	cmd, rest := fs.Arg(0), fs.Args()[min(1, fs.NArg()):]
	want := map[string]int{"set": 3, "get": 2, "delete": 2, "list": 1, "import": 2}[cmd]
	if want == 0 || len(rest) < want || (cmd != "delete" && len(rest) != want) {
		fs.Usage()
		return 2
	}
	src, w, closeFn, err := openTables(*url, *prefix, *file)
	if err != nil {
		fmt.Fprintf(stderr, "sluice tenants: %v\n", err)
		return 1
	}
	defer closeFn()
	t := tenantsRun{ctx: ctx, src: src, w: w, config: *config, format: *format, stdout: stdout}
	if err := t.run(cmd, rest); err != nil {
		fmt.Fprintf(stderr, "sluice tenants %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// openTables opens the tables in Redis at url, else in file.
func openTables(url, prefix, file string) (tenants.Source, tenants.Writer, func() error, error) {
	switch {
	case url != "":
		st, err := redis.Open(redis.Settings{URL: url, Prefix: prefix, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		tt := st.TenantTables()
		return tt, tt, st.Close, nil
	case file != "":
		f, err := tenants.OpenFile(file)
		if err != nil {
			return nil, nil, nil, err
		}
		return f, f, func() error { return nil }, nil
	}
	return nil, nil, nil, fmt.Errorf("no tables: set --redis-url (or SLUICE_REDIS_URL), or --tenants-file")
}

// tenantsRun is one run of a tenants subcommand.
type tenantsRun struct {
	ctx            context.Context
	src            tenants.Source
	w              tenants.Writer
	config, format string
	stdout         io.Writer
}

func (t tenantsRun) run(cmd string, args []string) error {
	table := args[0]
	switch cmd {
	case "get":
		row, ok, err := t.src.Row(t.ctx, table, args[1])
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("table %q has no row for %q: it is on the default plan", table, args[1])
		}
		fmt.Fprintln(t.stdout, row)
	case "delete":
		return t.w.Delete(t.ctx, table, args[1:]...)
	case "list":
		cw := csv.NewWriter(t.stdout)
		err := t.w.List(t.ctx, table, func(v, row string) bool { return cw.Write([]string{v, row}) == nil })
		cw.Flush()
		return cmp.Or(err, cw.Error())
	case "set":
		cfg, err := descriptors.Load(t.config)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		if err := tenants.Check(cfg, table, args[1], args[2]); err != nil {
			return fmt.Errorf("nothing written: %w", err)
		}
		return t.w.Set(t.ctx, table, map[string]string{args[1]: args[2]})
	case "import":
		return t.importFile(table, args[1])
	}
	return nil
}

// importFile checks every row of the file, then writes them all.
func (t tenantsRun) importFile(table, path string) error {
	cfg, err := descriptors.Load(t.config)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	in := io.Reader(os.Stdin)
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	format := t.format
	if format == "" {
		format = "csv"
		if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" {
			format = "yaml"
		}
	}
	rows, err := tenants.ReadRows(in, format)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := tenants.CheckAll(cfg, table, rows); err != nil {
		return fmt.Errorf("nothing imported: %w", err)
	}
	start := time.Now()
	if err := t.w.Import(t.ctx, table, rows); err != nil {
		return err
	}
	fmt.Fprintf(t.stdout, "imported %d rows into %s in %v\n", len(rows), table, time.Since(start).Round(time.Millisecond))
	return nil
}
