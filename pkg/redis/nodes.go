package redis

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// nodes are the Redis nodes of one Store and what they share: the script
// caller, the probes of stalled nodes, the test clock and the limits of
// calls in flight. It is the node layer's face to the decider: forKey
// finds the node that serves a key, reload follows a Cluster's slots,
// slotOf names a key's slot, load readies the script on every master and
// wait waits for the probes. It is safe for concurrent use.
type nodes struct {
	cluster *goredis.ClusterClient // nil unless on a Cluster
	caller  caller
	probes  sync.WaitGroup
	now     func() time.Time // the test clock, or nil
	flying  int              // Options.CallsInFlight
	most    int              // Options.MaxCallsInFlight
	one     *node            // standalone and Sentinel: the one node
	byAddr  sync.Map         // Cluster: master address -> *node
}

// newNodes returns the nodes of c: one node on a standalone or Sentinel
// Redis, made now; on a Cluster, one per master, made when first used.
// flying and most are Options.CallsInFlight and MaxCallsInFlight, now
// Options.Now.
func newNodes(c Client, now func() time.Time, flying, most int) *nodes {
	ns := &nodes{now: now, flying: flying, most: most}
	ns.cluster, _ = c.(*goredis.ClusterClient)
	if ns.cluster == nil {
		poolSize := 10 * runtime.GOMAXPROCS(0) // go-redis's default
		if sc, ok := c.(*goredis.Client); ok {
			poolSize = sc.Options().PoolSize
		}
		ns.one = ns.make(c, poolSize, func(ctx context.Context) error { return c.Ping(ctx).Err() })
	}
	return ns
}

// make returns a node on c, whose connection pool holds poolSize
// connections, probed by ping while stalled.
func (ns *nodes) make(c scriptClient, poolSize int, ping func(ctx context.Context) error) *node {
	flying := max(min(ns.flying, poolSize), 1)
	return newNode(&node{c: c, gate: newGate(ping), caller: &ns.caller, probes: &ns.probes, now: ns.now,
		flying: flying, most: max(flying, min(ns.most, poolSize-1))})
}

// forKey returns the node that serves key: the one node on a standalone or
// Sentinel Redis, the slot's master on a Cluster (which may ask a node for
// the Cluster's slots, until dl unless it is zero).
func (ns *nodes) forKey(ctx context.Context, dl time.Time, key string) (*node, error) {
	if ns.cluster == nil {
		return ns.one, nil
	}
	if !dl.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	c, err := ns.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: find the master of a slot: %w", limiter.ErrStoreUnavailable, err)
	}
	addr := c.Options().Addr
	if n, ok := ns.byAddr.Load(addr); ok && n.(*node).c == scriptClient(c) {
		return n.(*node), nil
	}
	n := ns.make(c, c.Options().PoolSize, func(ctx context.Context) error { return c.Ping(ctx).Err() })
	if old, loaded := ns.byAddr.LoadOrStore(addr, n); loaded && old.(*node).c == scriptClient(c) {
		return old.(*node), nil
	}
	ns.byAddr.Store(addr, n) // a new client for the address (the cluster reconnected)
	return n, nil
}

// reload reads a Cluster's slots again after a node refused a call because
// its slot moved (errMoved); it reports whether there is a Cluster to read.
func (ns *nodes) reload(ctx context.Context) bool {
	if ns.cluster == nil {
		return false
	}
	ns.cluster.ReloadState(ctx)
	return true
}

// slotOf is key's Cluster slot, 0 on a standalone Redis.
func (ns *nodes) slotOf(key string) int {
	if ns.cluster == nil {
		return 0
	}
	return slot(key)
}

// load loads the limiter function library (or the script) on every master
// of c, the client the nodes were made from.
func (ns *nodes) load(ctx context.Context, c Client) error {
	if ns.cluster != nil {
		return ns.cluster.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			return ns.caller.load(ctx, n)
		})
	}
	return ns.caller.load(ctx, c)
}

// wait waits for the probes of stalled nodes to end (they end once the
// client is closed).
func (ns *nodes) wait() { ns.probes.Wait() }
