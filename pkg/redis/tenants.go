package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/tenants"
)

// TenantTables are the tenant tables (tenants_from) in Redis: table NAME is
// the hash PREFIX+"tenants:"+NAME (entry value to row text), and every
// change to any table is an entry of one stream, PREFIX+"tenants:changes"
// (fields t, v, r: table, value, new row, "" when deleted; or t and reset
// for an import), that every instance follows to keep its cache current.
// The stream keeps about the last TenantFeedLength changes.
type TenantTables struct {
	c      tenantClient
	prefix string
	block  time.Duration
}

// TenantFeedLength is about how many changes the stream keeps: an
// instance further behind than that reads every row again as it uses it.
const TenantFeedLength = 100_000

// importBatch is the rows one HSET of an import carries; importPipeline
// the HSETs per round trip.
const (
	importBatch    = 500
	importPipeline = 20
)

// tenantClient is the part of a go-redis client the tables use.
type tenantClient interface {
	HGet(ctx context.Context, key, field string) *goredis.StringCmd
	HScan(ctx context.Context, key string, cursor uint64, match string, count int64) *goredis.ScanCmd
	XRead(ctx context.Context, a *goredis.XReadArgs) *goredis.XStreamSliceCmd
	XRange(ctx context.Context, stream, start, stop string) *goredis.XMessageSliceCmd
	XRevRangeN(ctx context.Context, stream, start, stop string, count int64) *goredis.XMessageSliceCmd
	Pipeline() goredis.Pipeliner
}

var (
	_ tenants.Source = (*TenantTables)(nil)
	_ tenants.Writer = (*TenantTables)(nil)
)

// TenantTables returns the tenant tables on the Store's Redis, nil when
// its client cannot serve them (a test's fake).
func (s *Store) TenantTables() *TenantTables {
	c, ok := s.c.(tenantClient)
	if !ok {
		return nil
	}
	return &TenantTables{c: c, prefix: s.prefix, block: time.Second}
}

func (t *TenantTables) hash(table string) string { return t.prefix + "tenants:" + table }
func (t *TenantTables) feed() string             { return t.prefix + "tenants:changes" }

// Row returns the text of value's row of table.
func (t *TenantTables) Row(ctx context.Context, table, value string) (string, bool, error) {
	s, err := t.c.HGet(ctx, t.hash(table), value).Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("hget %s: %w", t.hash(table), err)
	}
	return s, true, nil
}

// Changes reads the changes after cursor, waiting up to a second for one.
// The cursor "" starts after the newest change.
func (t *TenantTables) Changes(ctx context.Context, cursor string) ([]tenants.Change, string, error) {
	if cursor == "" {
		last, err := t.c.XRevRangeN(ctx, t.feed(), "+", "-", 1).Result()
		if err != nil {
			return nil, "", fmt.Errorf("xrevrange %s: %w", t.feed(), err)
		}
		cursor = "0-0"
		if len(last) > 0 {
			cursor = last[0].ID
		}
	}
	res, err := t.c.XRead(ctx, &goredis.XReadArgs{Streams: []string{t.feed(), cursor}, Count: 1000, Block: t.block}).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, cursor, nil
	}
	if err != nil {
		return nil, cursor, fmt.Errorf("xread %s: %w", t.feed(), err)
	}
	var out []tenants.Change
	next := cursor
	for _, s := range res {
		for _, m := range s.Messages {
			next = m.ID
			out = append(out, change(m.Values))
		}
	}
	if len(out) > 0 && cursor != "0-0" && t.trimmed(ctx, cursor) {
		return out, next, tenants.ErrGap
	}
	return out, next, nil
}

// trimmed reports whether the stream no longer holds cursor's own entry:
// changes after it may have been trimmed before they were read. A
// cautious answer: the caller only reads its rows again.
func (t *TenantTables) trimmed(ctx context.Context, cursor string) bool {
	m, err := t.c.XRange(ctx, t.feed(), cursor, cursor).Result()
	return err == nil && len(m) == 0
}

func change(v map[string]any) tenants.Change {
	str := func(k string) string { s, _ := v[k].(string); return s }
	return tenants.Change{Table: str("t"), Value: str("v"), Row: str("r"), Reset: str("reset") != ""}
}

// xadd is one change's entry of the stream.
func (t *TenantTables) xadd(ctx context.Context, p goredis.Pipeliner, values ...any) {
	p.XAdd(ctx, &goredis.XAddArgs{Stream: t.feed(), MaxLen: TenantFeedLength, Approx: true, Values: values})
}

// Set writes rows to table, each reported in the stream, in one round trip.
func (t *TenantTables) Set(ctx context.Context, table string, rows map[string]string) error {
	p := t.c.Pipeline()
	for v, r := range rows {
		p.HSet(ctx, t.hash(table), v, r)
		t.xadd(ctx, p, "t", table, "v", v, "r", r)
	}
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("set %d rows of %s: %w", len(rows), t.hash(table), err)
	}
	return nil
}

// Delete removes values' rows from table, each reported in the stream.
func (t *TenantTables) Delete(ctx context.Context, table string, values ...string) error {
	p := t.c.Pipeline()
	for _, v := range values {
		p.HDel(ctx, t.hash(table), v)
		t.xadd(ctx, p, "t", table, "v", v, "r", "")
	}
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("delete %d rows of %s: %w", len(values), t.hash(table), err)
	}
	return nil
}

// Import writes rows to table, importBatch rows per HSET and importPipeline
// HSETs per round trip, then reports one reset in the stream.
func (t *TenantTables) Import(ctx context.Context, table string, rows [][2]string) error {
	p := t.c.Pipeline()
	args := make([]any, 0, 2*importBatch)
	flush := func(force bool) error {
		if len(args) > 0 {
			p.HSet(ctx, t.hash(table), args...)
			args = make([]any, 0, 2*importBatch)
		}
		if p.Len() >= importPipeline || (force && p.Len() > 0) {
			if _, err := p.Exec(ctx); err != nil {
				return fmt.Errorf("import into %s: %w", t.hash(table), err)
			}
		}
		return nil
	}
	for _, r := range rows {
		if args = append(args, r[0], r[1]); len(args) == 2*importBatch {
			if err := flush(false); err != nil {
				return err
			}
		}
	}
	t.xadd(ctx, p, "t", table, "reset", "1")
	return flush(true)
}

// List calls fn with every row of table (HSCAN), until fn returns false.
func (t *TenantTables) List(ctx context.Context, table string, fn func(value, row string) bool) error {
	var cursor uint64
	for {
		kv, next, err := t.c.HScan(ctx, t.hash(table), cursor, "", 1000).Result()
		if err != nil {
			return fmt.Errorf("hscan %s: %w", t.hash(table), err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if !fn(kv[i], kv[i+1]) {
				return nil
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
