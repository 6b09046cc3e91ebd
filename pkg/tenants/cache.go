package tenants

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// Defaults of Options.
const (
	// DefaultSize is Options.Size when zero: rows (absences included) held.
	DefaultSize = 100_000
	// DefaultTimeout is Options.Timeout when zero. A row is read on the
	// request path once per value (then on each change), so its budget is
	// close to a store call's.
	DefaultTimeout = 20 * time.Millisecond
	// DefaultRetryAfter is Options.RetryAfter when zero.
	DefaultRetryAfter = time.Second
)

const shards = 32

// Options configures NewCache. The zero value of every field is usable.
type Options struct {
	// Size bounds the rows the cache holds, absences included; the least
	// recently used go first. DefaultSize when zero.
	Size int
	// Timeout bounds each read of a row. DefaultTimeout when zero.
	Timeout time.Duration
	// RetryAfter is the least time between two reads of one value after
	// a read failed: meanwhile the value keeps its last row. DefaultRetryAfter
	// when zero.
	RetryAfter time.Duration
	// Logger is told when the table cannot be read and when it can again.
	// nil means zap.NewNop().
	Logger *zap.Logger
}

// Stats are a Cache's counters since it was made.
type Stats struct {
	// Lookups is every Tenant call; Reads the ones that read the Source.
	Lookups, Reads uint64
	// ReadErrors are reads that failed: the value got its last row seen,
	// else the default plan.
	ReadErrors uint64
	// BadRows are rows whose text did not parse: their value got the
	// default plan.
	BadRows uint64
	// Changes are changes the feed reported; FeedErrors its failures.
	Changes, FeedErrors uint64
	// Rows is the rows held now.
	Rows int
}

// Cache answers tenant rows on the request path from a bounded LRU over a
// Source, kept current by Run. It is safe for concurrent use and
// implements ratelimit.Tenants.
type Cache struct {
	src  Source
	opts Options
	log  *zap.Logger
	seed maphash.Seed
	sh   [shards]shard

	epoch                                           atomic.Uint64 // rows cached at another epoch are read again
	changes                                         atomic.Uint64 // changes applied, to spot a read that raced one
	lookups, reads, readErrors, badRows, feedErrors atomic.Uint64
}

// key is a cached row's identity.
type key struct{ table, value string }

// entry is one cached row, in its shard's LRU list.
type entry struct {
	k          key
	row        *descriptors.TenantRow // nil: the table has no row
	epoch      uint64                 // 0: to be read again
	retryAt    int64                  // after a failed read, UnixNano before which none is tried
	prev, next *entry
}

// shard is one lock's part of the LRU.
type shard struct {
	mu   sync.Mutex
	m    map[key]*entry
	head entry // sentinel: head.next is the most recently used
	max  int
}

// NewCache returns a Cache over src. Call Run to keep it current.
func NewCache(src Source, o Options) *Cache {
	if o.Size <= 0 {
		o.Size = DefaultSize
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	c := &Cache{src: src, opts: o, log: o.Logger, seed: maphash.MakeSeed()}
	c.epoch.Store(1)
	for i := range c.sh {
		s := &c.sh[i]
		s.m = make(map[key]*entry)
		s.head.next, s.head.prev = &s.head, &s.head
		s.max = max(1, (o.Size+shards-1)/shards)
	}
	return c
}

func (c *Cache) shard(k key) *shard {
	return &c.sh[maphash.String(c.seed, k.value)%shards]
}

// Tenant returns value's row of table: from the cache while it is current,
// else read from the Source (bounded by Options.Timeout). When the read
// fails it returns the row last seen, else nil, and counts the failure.
func (c *Cache) Tenant(ctx context.Context, table, value string) *descriptors.TenantRow {
	c.lookups.Add(1)
	k := key{table, value}
	s := c.shard(k)
	var last *descriptors.TenantRow
	s.mu.Lock()
	if e := s.m[k]; e != nil {
		s.touch(e)
		if e.epoch == c.epoch.Load() || time.Now().UnixNano() < e.retryAt {
			row := e.row
			s.mu.Unlock()
			return row
		}
		last = e.row
	}
	s.mu.Unlock()
	return c.read(ctx, s, k, last)
}

// read reads k's row from the Source and caches it; on failure it caches
// last (the row seen before) until Options.RetryAfter has passed.
func (c *Cache) read(ctx context.Context, s *shard, k key, last *descriptors.TenantRow) *descriptors.TenantRow {
	c.reads.Add(1)
	epoch, seq := c.epoch.Load(), c.changes.Load()
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	text, ok, err := c.src.Row(ctx, k.table, k.value)
	cancel()
	if err != nil {
		c.readErrors.Add(1)
		if ce := c.log.Check(zap.DebugLevel, "tenant table unreadable: the last row seen, else the default plan"); ce != nil {
			ce.Write(zap.String("table", k.table), zap.Error(err))
		}
		s.put(&entry{k: k, row: last, retryAt: time.Now().Add(c.opts.RetryAfter).UnixNano()})
		return last
	}
	row := c.parse(text, ok)
	if c.changes.Load() != seq {
		epoch = 0 // a change may have come in during the read: read again next time
	}
	s.put(&entry{k: k, row: row, epoch: epoch})
	return row
}

// parse returns the row text stands for, nil when absent or unparsable.
func (c *Cache) parse(text string, ok bool) *descriptors.TenantRow {
	if !ok {
		return nil
	}
	row, err := descriptors.ParseTenantRow(text)
	if err != nil {
		c.badRows.Add(1)
		return nil
	}
	return row
}

// Run follows the Source's change feed until ctx ends, updating the rows
// cached (and only those), and returns nil then. While the feed fails it
// retries each second; once it works again every cached row is read again
// when next used, since changes may have been missed.
func (c *Cache) Run(ctx context.Context) error {
	cursor, failing := "", false
	for ctx.Err() == nil {
		changes, next, err := c.src.Changes(ctx, cursor)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrGap):
			c.epoch.Add(1)
		case err != nil:
			c.feedErrors.Add(1)
			if !failing {
				c.log.Warn("tenant change feed failing: cached rows stay as last seen", zap.Error(err))
			}
			failing = true
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if failing {
			c.log.Info("tenant change feed back: cached rows are read again as they are used")
			c.epoch.Add(1)
			failing = false
		}
		cursor = next
		for _, ch := range changes {
			c.Apply(ch)
		}
	}
	return nil
}

// Apply applies one change to the rows cached: a row held is replaced (or
// removed, for a deletion); a Reset makes every row read again when next
// used. A value not cached stays so.
func (c *Cache) Apply(ch Change) {
	c.changes.Add(1)
	if ch.Reset {
		c.epoch.Add(1)
		return
	}
	k := key{ch.Table, ch.Value}
	row := c.parse(ch.Row, ch.Row != "")
	s := c.shard(k)
	s.mu.Lock()
	if e := s.m[k]; e != nil {
		e.row, e.epoch, e.retryAt = row, c.epoch.Load(), 0
	}
	s.mu.Unlock()
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	n := 0
	for i := range c.sh {
		s := &c.sh[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return Stats{Lookups: c.lookups.Load(), Reads: c.reads.Load(), ReadErrors: c.readErrors.Load(),
		BadRows: c.badRows.Load(), Changes: c.changes.Load(), FeedErrors: c.feedErrors.Load(), Rows: n}
}

// touch moves e to the front of s's list. s.mu is held.
func (s *shard) touch(e *entry) {
	if s.head.next == e {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	s.front(e)
}

func (s *shard) front(e *entry) {
	e.prev, e.next = &s.head, s.head.next
	s.head.next.prev = e
	s.head.next = e
}

// put caches e in place of any entry of its key, evicting the least
// recently used beyond s.max.
func (s *shard) put(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.m[e.k]; old != nil {
		old.prev.next, old.next.prev = old.next, old.prev
	}
	s.m[e.k] = e
	s.front(e)
	for len(s.m) > s.max {
		lru := s.head.prev
		lru.prev.next, lru.next.prev = lru.next, lru.prev
		delete(s.m, lru.k)
	}
}
