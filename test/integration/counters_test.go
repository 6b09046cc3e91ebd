package integration

import (
	"context"
	bin "encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The helpers here read what the binary wrote in Redis, from outside: the
// keys under a prefix, a counter's counts, and for a Cluster the slot and the
// master of a key. They speak RESP through redistest.Do, so the tests check
// Redis itself, not what Sluice says about it.

// keysUnder returns every key under prefix on each of addrs (every master of
// a Cluster, or one standalone server), by SCAN.
func keysUnder(t *testing.T, addrs []string, prefix string) []string {
	t.Helper()
	var keys []string
	for _, a := range addrs {
		cursor := "0"
		for {
			r, err := redistest.Do(a, "SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000")
			if err != nil {
				t.Fatalf("SCAN %s on %s: %v", prefix, a, err)
			}
			rr := r.([]any)
			for _, k := range rr[1].([]any) {
				keys = append(keys, k.(string))
			}
			if cursor = rr[0].(string); cursor == "0" {
				break
			}
		}
	}
	return keys
}

// keyHolding returns the one key under prefix that holds s (a descriptor
// value), failing t when there is not exactly one.
func keyHolding(t *testing.T, addrs []string, prefix, s string) string {
	t.Helper()
	var found []string
	for _, k := range keysUnder(t, addrs, prefix) {
		if strings.Contains(k, s) && !strings.Contains(k, "}:") { // not an undo marker
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		t.Fatalf("keys under %q holding %q: %q, want one", prefix, s, found)
	}
	return found[0]
}

// counted returns the hits a sliding or fixed window counter holds, 0 when
// the key is missing: with one sub-window the sum of its hash's counts (cur
// and prev, all but the index "i"); with several the running total of its
// packed string (pkg/redis's lua/sliding_sub.lua: a little-endian double in its
// head); a fixed window's count (the second double of its string). A run
// shorter than the window loses none. addrs are tried in turn (a Cluster
// key lives on one master).
func counted(t *testing.T, addrs []string, key string) uint64 {
	t.Helper()
	for _, a := range addrs {
		typ, err := redistest.Do(a, "TYPE", key)
		if err != nil {
			if strings.HasPrefix(err.Error(), "MOVED") {
				continue
			}
			t.Fatalf("TYPE %q on %s: %v", key, a, err)
		}
		if typ == "string" {
			return packedTotal(t, a, key, strings.Contains(key, "{fwd:"))
		}
		r, err := redistest.Do(a, "HGETALL", key)
		if err != nil {
			if strings.HasPrefix(err.Error(), "MOVED") {
				continue
			}
			t.Fatalf("HGETALL %q on %s: %v", key, a, err)
		}
		kv := r.([]any)
		var n uint64
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == "i" {
				continue
			}
			x, err := strconv.ParseUint(kv[i+1].(string), 10, 64)
			if err != nil {
				t.Fatalf("HGETALL %q: field %v: %v", key, kv[i], err)
			}
			n += x
		}
		return n
	}
	t.Fatalf("no node of %v holds slot of %q", addrs, key)
	return 0
}

// packedTotal reads the running total of the packed sub-window string at
// key on addr, or with fixed the count of a fixed window's string ('<dd':
// the window index, the count).
func packedTotal(t *testing.T, addr, key string, fixed bool) uint64 {
	t.Helper()
	r, err := redistest.Do(addr, "GET", key)
	if err != nil {
		t.Fatalf("GET %q on %s: %v", key, addr, err)
	}
	v, _ := r.(string)
	if fixed {
		if len(v) != 16 {
			t.Fatalf("GET %q: %d bytes, want 16", key, len(v))
		}
		return uint64(math.Float64frombits(bin.LittleEndian.Uint64([]byte(v[8:]))))
	}
	if len(v) < 26 {
		t.Fatalf("GET %q: %d bytes, want a 26-byte head", key, len(v))
	}
	h := len(v) - 26 // the head: at, total, the current count, the slot width, a salt byte
	return uint64(math.Float64frombits(bin.LittleEndian.Uint64([]byte(v[h+8 : h+16]))))
}

// keySlot returns the Cluster slot of key, by CLUSTER KEYSLOT on addr.
func keySlot(t *testing.T, addr, key string) int64 {
	t.Helper()
	r, err := redistest.Do(addr, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
	}
	return r.(int64)
}

// masterOf returns the address of the master serving slot, by CLUSTER SLOTS
// on addr.
func masterOf(t *testing.T, addr string, slot int64) string {
	t.Helper()
	r, err := redistest.Do(addr, "CLUSTER", "SLOTS")
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	for _, rg := range r.([]any) {
		rg := rg.([]any)
		if rg[0].(int64) <= slot && slot <= rg[1].(int64) {
			n := rg[2].([]any)
			return fmt.Sprintf("%s:%d", n[0].(string), n[1].(int64))
		}
	}
	t.Fatalf("no master serves slot %d", slot)
	return ""
}

// valueKeys finds, for the descriptor key entry of domain, how the binary
// names the counter of a value: it sends one probe value (counted once) and
// finds its key under prefix; the returned function gives the Redis key of
// any other value of 8 bytes, the probe's length (the key encoding
// length-prefixes values, so the rest of the key is the same).
func valueKeys(t *testing.T, s *sluice, addrs []string, prefix, domain, entry string) func(value string) string {
	t.Helper()
	probe := ("q" + entry + "________")[:8] // 8 bytes, one per entry key
	// On a loaded host a call may miss its 15 ms: the probe is sent again.
	var err error
	if !eventually(2*time.Second, 20*time.Millisecond, func() bool {
		_, err = s.Client.ShouldRateLimit(context.Background(), request(domain, []string{entry, probe}))
		return err == nil
	}) {
		t.Fatalf("probe %s=%s: %v", entry, probe, err)
	}
	key := keyHolding(t, addrs, prefix, probe)
	return func(v string) string {
		if len(v) != len(probe) {
			t.Fatalf("value %q: want %d bytes, as the probe %q", v, len(probe), probe)
		}
		return strings.Replace(key, probe, v, 1)
	}
}

// placed is a descriptor value and where its counter lives on a Cluster.
type placed struct {
	value, key, master string
	slot               int64
}

// shardValues picks values of col and big (domain shard) whose counters are
// on two different masters, col's in the lower slot, so that a request
// [col][big] decides col's slot first.
func shardValues(t *testing.T, s *sluice, addrs []string, prefix string) (col, big placed) {
	t.Helper()
	ck := valueKeys(t, s, addrs, prefix, "shard", "col")
	bk := valueKeys(t, s, addrs, prefix, "shard", "big")
	place := func(v string, key func(string) string) placed {
		k := key(v)
		sl := keySlot(t, addrs[0], k)
		return placed{value: v, key: k, slot: sl, master: masterOf(t, addrs[0], sl)}
	}
	for i := range 1000 {
		col = place(fmt.Sprintf("c%07d", i), ck)
		if col.slot < 8000 {
			break
		}
	}
	for i := range 1000 {
		big = place(fmt.Sprintf("b%07d", i), bk)
		if big.slot > col.slot && big.master != col.master {
			return col, big
		}
	}
	t.Fatalf("no value of big on another master than col's %v, in a later slot", col)
	return col, big
}

// refundValues picks a value for each of parent, sibling and tight whose
// counters are in ascending slots, tight's last, on three masters where it
// can, so every denial by tight is refunded on the two others' slots.
func refundValues(t *testing.T, s *sluice, addrs []string, prefix, tag string) (vals [3]string, keys [3]string) {
	t.Helper()
	names := [3]string{"parent", "sibling", "tight"}
	var kf [3]func(string) string
	for i, n := range names {
		kf[i] = valueKeys(t, s, addrs, prefix, "refund", n)
	}
	var last int64 = -1
	used := map[string]bool{}
	for i := range names {
		for c := 0; ; c++ {
			if c > 5000 {
				t.Fatalf("no value of %s in a slot after %d", names[i], last)
			}
			v := fmt.Sprintf("%s%06d", tag, c)[:8]
			k := kf[i](v)
			sl := keySlot(t, addrs[0], k)
			m := masterOf(t, addrs[0], sl)
			if sl > last && (!used[m] || c > 2000) && (i < 2 || sl > 10000) {
				vals[i], keys[i], last, used[m] = v, k, sl, true
				break
			}
		}
	}
	return vals, keys
}
