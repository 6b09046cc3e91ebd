// Package tenants keeps the tenant tables that rules name with
// tenants_from: which plan (or which limits of its own) each entry value
// is on. A table lives in a Source (Redis, or a watched file with the
// in-memory store); a Cache reads it on the request path through a bounded
// LRU, absences included, kept current by the Source's change feed, so an
// instance sees a change within about a second without re-reading what it
// holds. A table that cannot be read never fails a decision: the Cache
// answers the row last seen, else no row (the rule's default plan), and
// counts the failure.
package tenants

import (
	"context"
	"errors"
)

// MaxValueBytes is the longest entry value a table may hold a row for:
// Envoy's entries are bounded the same way by --max-key-bytes' default,
// and a longer value could never match a request's entry.
const MaxValueBytes = 256

// Change is one change to a table, as a Source's feed reports it.
type Change struct {
	// Table is the table changed.
	Table string
	// Value is the entry value whose row changed; "" with Reset.
	Value string
	// Row is the row's new text; "" when it was deleted.
	Row string
	// Reset reports that many rows of Table may have changed at once (an
	// import): every row cached of it is to be read again when next used.
	Reset bool
}

// Source is where tables live. Implementations are safe for concurrent
// use.
type Source interface {
	// Row returns the text of value's row of table; ok is false when the
	// table has none. An error means the table could not be read.
	Row(ctx context.Context, table, value string) (text string, ok bool, err error)
	// Changes waits up to about a second for changes made after cursor
	// and returns them with the cursor to pass next. The cursor "" means
	// "from now". ErrGap means changes since cursor were lost: every
	// cached row is to be read again.
	Changes(ctx context.Context, cursor string) ([]Change, string, error)
}

// ErrGap is returned by Source.Changes when changes after the cursor were
// lost (trimmed from the feed): the caller re-reads what it holds, lazily.
var ErrGap = errors.New("tenants: changes lost since the cursor")

// Writer writes a Source's tables; the commands and the admin API use it.
type Writer interface {
	// Set writes rows (value to row text) to table and reports each one in
	// the change feed.
	Set(ctx context.Context, table string, rows map[string]string) error
	// Import writes rows to table in pipelined batches and reports one
	// Reset in the feed.
	Import(ctx context.Context, table string, rows [][2]string) error
	// Delete removes values' rows from table.
	Delete(ctx context.Context, table string, values ...string) error
	// List calls fn with every row of table, in no particular order,
	// until fn returns false.
	List(ctx context.Context, table string, fn func(value, row string) bool) error
}
