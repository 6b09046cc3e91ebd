package redis

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
)

// The wire layout of a script call, defined here once: each part is a
// format of Redis's Lua struct library ('<' little-endian, B one byte, H
// 16 bits, d a double: exact for whole numbers below 2^53, and every count
// and time is whole). Go's sizes follow from the formats (formatSize); the
// script reads the same formats, as constants of the protocol prelude that
// luaProtocol writes from layout, and a test checks Lua's sizes against
// Go's.
//
// A call is KEYS (every key of the batch once: counters, and the markers of
// undo entries), ARGV[1] (now in Unix ms, or "" for Redis TIME), ARGV[2]
// (fmtSpec per key, in KEYS order) and ARGV[3] (the entries, one after
// another). Its reply is one string: fmtNow, then each entry's reply in
// order.
const (
	// fmtSpec is a key's identity beside it: the algorithm (limiter's
	// number; markerAlgorithm for a marker), the window in ms and the
	// sub-windows (limiter.Limit.SubWindowCount). A fixed window on a
	// calendar (limiter.Limit.Calendar) has no sub-windows: its last byte is
	// limiter.CalendarBounds instead, and that many fmtBound follow it.
	fmtSpec = "<BdB"
	// fmtBound is one start of a calendar period (limiter.Calendar.Bounds:
	// around the caller's clock), Unix ms; the script counts in the one
	// holding its own clock. Not in layout: the script reads it as the
	// literal '<d', its main chunk being at Lua's limit of 200 locals.
	fmtBound = "<d"
	// fmtPenalty follows a key's spec (and bounds) when its algorithm byte
	// has penaltyBit: the limiter.Penalty's block (ms), escalate, max (ms)
	// and forget (ms). Not in layout, for the same reason as fmtBound: the
	// script reads it as the literal '<dddd'.
	fmtPenalty = "<dddd"
	// fmtEntry starts an entry: its kind (kindApply, kindCheck, kindUndo,
	// with the bits kindFull and kindLease) and its count: the hits of an
	// apply or check, the counters of an undo.
	fmtEntry = "<BH"
	// fmtHit is one hit of an apply or check: the key's index (1-based into
	// KEYS), requests, burst (a token bucket's capacity, 0 for the others),
	// hits, the flags (flagRefund ...), the lease permits asked beyond the
	// hits, with flagCeiling the capacity of a pool's class
	// (limiter.Limit.Capacity under its Ceiling: the requests, or a token
	// bucket's burst, that the class may fill its pool to; 0 otherwise),
	// and with flagSlot the slot token (limiter.Hit.SlotToken: the slots a
	// concurrency acquire takes, or a release frees; 0 otherwise).
	fmtHit = "<HdddBddd"
	// fmtUndo follows an undo's fmtEntry: its marker key's index (0: none)
	// and the marker's TTL in ms.
	fmtUndo = "<Hd"
	// fmtUndoKey is one counter of an undo: its key index and the token
	// (u1, u2) that its apply's reply gave.
	fmtUndoKey = "<Hdd"

	// fmtNow starts the reply: the script's clock, Unix ms.
	fmtNow = "<d"
	// fmtAdmitted starts the reply of an apply or check: 1 admitted, 0
	// not, or entryFailed.
	fmtAdmitted = "<B"
	// fmtHitFull is one hit's full reply (an entry of a request over several
	// slots): bits (1 allowed, 2 exceeds, 4 blocked by a penalty), retry_after_ms, then remaining
	// and reset_after_ms if denied (the counters as the entry found them),
	// then if admitted (after its consumption); the caller picks a pair,
	// because another slot's script may deny what this one admitted.
	fmtHitFull = "<Bddddd"
	// fmtHitShort is one hit's short reply (a request in one slot, whose
	// entry's outcome is the request's): bits, retry_after_ms and the pair
	// of the outcome.
	fmtHitShort = "<Bddd"
	// fmtKeyFull follows the hits of a full reply, per key of the entry in
	// the order of its first hit: the undo token (u1, u2; u2 = 0 when there
	// is nothing to take back), the permits leased and the number of undo
	// tokens more that follow it (fmtUndoMore each): a refund that reached
	// hits in older (sub-)windows changed those too, and an undo takes back
	// each change where it was made.
	fmtKeyFull = "<dddB"
	// fmtUndoMore is one more undo token of a key (u1, u2), after its
	// fmtKeyFull.
	fmtUndoMore = "<dd"
	// fmtKeyLease follows the hits of a short reply with a lease asked, per
	// key: u1 and the permits leased.
	fmtKeyLease = "<dd"
	// fmtUndone is an undo's reply: the counters it changed, undoRan when
	// its marker existed (it already ran), or undoFailed.
	fmtUndone = "<d"
	// fmtMessage follows the head of an entry that raised an error
	// (entryFailed, undoFailed): the length of the message, then the
	// message (at most maxMessage bytes).
	fmtMessage = "<H"
)

// The values inside the layout.
const (
	// The kinds of an entry. Apply decides its hits and consumes only if the
	// request is admitted (limiter.MarkOverLimit's rule); check decides as
	// apply but writes only what overdraw and count-denied hits consume,
	// for the slots of a Cluster request another slot denied; undo takes
	// back what an admitting apply consumed, or a lease's unspent permits
	// (with a marker, idempotent: a retry changes nothing).
	kindApply = 1
	kindCheck = 2
	kindUndo  = 3
	// kindFull asks for the full reply of an apply or check, kindLease says
	// a hit asks for a lease; the kind is their sum with one of the above.
	kindFull  = 16
	kindLease = 32

	// markerAlgorithm is the algorithm byte of a marker key.
	markerAlgorithm = 255
	// penaltyBit is set in a key's algorithm byte when fmtPenalty follows
	// its spec (the script tests it as the literal 64).
	penaltyBit = 64

	// The flags of a hit, summed.
	flagRefund   = 1
	flagShadow   = 2
	flagExceeds  = 4 // the key's growth is over the Limit's Capacity, compared in Go on uint64
	flagQuota    = 8
	flagOverdraw = 16
	// flagCountDenied marks a hit counted whatever the outcome
	// (limiter.Limit.CountDenied), decided as any other.
	flagCountDenied = 32
	// flagSlot marks a hit of an algorithm that counts requests in flight
	// carrying a slot token (the hit's token field), which the fast path
	// does not read.
	flagSlot = 64
	// flagCeiling marks a pool's class, decided and reported under its
	// capacity (the hit's ceiling field). It is the highest flag: the
	// script's fast path takes a hit whose flags are 0 mod flagCeiling.
	flagCeiling = 128

	// entryFailed is the fmtAdmitted of an apply or check that raised an
	// error, undoRan and undoFailed the fmtUndone of an undo that already
	// ran or raised one. A failed entry fails alone: the script decides the
	// other entries of its call as if it were not there.
	entryFailed = 255
	undoRan     = -1
	undoFailed  = -2
	maxMessage  = 200

	// maxBatchKeys bounds the keys of one script call (its key indexes are
	// 16 bits), maxBatchEntries its entries and maxEntryCount the hits, keys
	// or undo tokens of one entry (fmtEntry's count; an entry over it is
	// refused alone, before any call: check).
	maxBatchKeys    = 1 << 15
	maxBatchEntries = 256
	maxEntryCount   = math.MaxUint16
)

// The sizes of the parts, in bytes.
var (
	specSize    = formatSize(fmtSpec)
	entrySize   = formatSize(fmtEntry)
	hitSize     = formatSize(fmtHit)
	undoSize    = formatSize(fmtUndo)
	undoKeySize = formatSize(fmtUndoKey)
)

// layout lists the protocol's formats and values under their names in the
// script (the constants of luaProtocol): the one table both sides read.
var layout = []struct {
	lua   string
	value any // a format string or a number
}{
	{"F_SPEC", fmtSpec}, {"F_ENTRY", fmtEntry}, {"F_HIT", fmtHit}, {"F_UNDO", fmtUndo}, {"F_UNDOKEY", fmtUndoKey},
	{"F_NOW", fmtNow}, {"F_ADMITTED", fmtAdmitted}, {"F_HITFULL", fmtHitFull}, {"F_HITSHORT", fmtHitShort},
	{"F_KEYFULL", fmtKeyFull}, {"F_UNDOMORE", fmtUndoMore}, {"F_KEYLEASE", fmtKeyLease}, {"F_UNDONE", fmtUndone},
	{"F_MESSAGE", fmtMessage},
	// An apply entry's short reply of its first hit, fmtAdmitted then
	// fmtHitShort in one pack.
	{"F_FIRSTSHORT", fmtAdmitted + fmtHitShort[1:]},
	// Where a hit's flags are: what the fast path reads.
	{"O_HITFLAGS", formatSize(fmtHit[:5])},
	// A pool's class's capacity: its format, and oneEntry's read of the
	// plain fields with the flags, what follows them and where the
	// capacity is in that.
	{"F_HITCEILING", "<" + fmtHit[7:8]},
	{"F_HITONE", fmtHit[:6]}, {"Z_HITTAIL", formatSize(fmtHit[6:])}, {"O_TAILCEILING", formatSize(fmtHit[6:7])},
	{"Z_HIT", formatSize(fmtHit)}, {"Z_UNDO", formatSize(fmtUndo)}, {"Z_UNDOKEY", formatSize(fmtUndoKey)},
	{"K_APPLY", kindApply}, {"K_CHECK", kindCheck}, {"K_UNDO", kindUndo}, {"K_FULL", kindFull}, {"K_LEASE", kindLease},
	{"FL_REFUND", flagRefund}, {"FL_SHADOW", flagShadow}, {"FL_EXCEEDS", flagExceeds}, {"FL_QUOTA", flagQuota},
	{"FL_OVERDRAW", flagOverdraw}, {"FL_COUNTDENIED", flagCountDenied}, {"FL_SLOT", flagSlot}, {"FL_CEILING", flagCeiling},
	{"MARKER", markerAlgorithm}, {"FAILED", entryFailed}, {"UNDO_RAN", undoRan}, {"UNDO_FAILED", undoFailed},
	{"MAX_MESSAGE", maxMessage},
	{"MAX", limiter.MaxCount}, {"MAXLOG", limiter.MaxLogRequests},
}

// formatSize is the bytes of a struct format of B, H and d fields.
func formatSize(f string) int {
	n := 0
	for _, c := range strings.TrimPrefix(f, "<") {
		switch c {
		case 'B':
			n++
		case 'H':
			n += 2
		case 'd':
			n += 8
		default:
			panic("redis: format " + strconv.Quote(f) + " has a field other than B, H or d")
		}
	}
	return n
}

// entry is what one script call decides for one request in one slot: an
// apply or check of its hits, or an undo. Several entries of one slot share
// a call (a batch).
type entry struct {
	kind  byte
	full  bool      // an apply or check that needs the full reply (a request over several slots)
	lease bool      // a hit asks for a lease
	keys  []string  // its counters in the order of their first hit; an undo's marker last
	specs []keySpec // per key
	hits  []hitArg  // apply and check
	undo  []float64 // undo: the tokens, u1 and u2 each; the k-th is of key k, or of key undoKey[k]
	// undoKey is, when a key has several undo tokens, the index into keys
	// of each token of undo; nil when the k-th token is key k's.
	undoKey []int
	ttl     float64 // undo: the marker's TTL in ms; 0 without a marker

	// The reply.
	now      float64 // the script's clock, Unix ms
	admitted bool
	hr       []hitReply
	kr       []keyReply
	changed  float64 // undo: counters changed, undoRan if it already ran
	err      error   // the entry raised an error in the script (entryFailed, undoFailed)
}

// check returns an error when e does not fit the layout (its counts and
// key indexes are 16 bits: maxEntryCount): such an entry is never sent,
// and only its own decision fails.
func (e *entry) check() error {
	if len(e.keys) > maxEntryCount || len(e.hits) > maxEntryCount || len(e.undo)/2 > maxEntryCount {
		return fmt.Errorf("%w: a decision of %d hits on %d counters is more than one limiter script entry holds (%d)",
			limiter.ErrStoreUnavailable, len(e.hits), len(e.keys), maxEntryCount)
	}
	return nil
}

// keySpec is a counter's identity beside its key (fmtSpec): what the script
// needs to read it.
type keySpec struct {
	alg    byte
	window float64 // ms
	subs   byte
	cal    limiter.Calendar // a fixed window's calendar; none for the others
	pen    limiter.Penalty  // the counter's penalty; none for most
}

// hitArg is one hit of an entry (fmtHit). The numbers are the doubles the
// script computes with (a uint64 converts to the nearest, as tonumber did
// with the decimal text).
type hitArg struct {
	key                   int // into entry.keys
	requests, burst, hits float64
	flags                 byte
	lease                 float64
	ceiling               float64 // the class's capacity; 0 without flagCeiling
	token                 float64 // the slot token; 0 without flagSlot
}

// hitReply is the script's answer for one hit (fmtHitFull, fmtHitShort).
type hitReply struct {
	allowed, exceeds bool
	blocked          bool // a penalty's block denied it (bit 4)
	retry            float64
	remDenied        float64
	resetDenied      float64
	remAdmitted      float64
	resetAdmitted    float64
}

// keyReply is the script's undo token for one key of an entry, and the
// permits it leased (fmtKeyFull, fmtKeyLease).
type keyReply struct {
	u1, u2, leased float64
	// more holds the key's further undo tokens (fmtUndoMore), u1 and u2
	// each; nil for none.
	more []float64
}

func specOf(l limiter.Limit) keySpec {
	return keySpec{alg: byte(l.Algorithm), window: float64(l.Window.Milliseconds()), subs: byte(l.SubWindowCount()), cal: l.Calendar, pen: l.Penalty}
}

// encode returns the KEYS, the key specs (ARGV[2]) and the entries
// (ARGV[3]) of one script call deciding es, which share a slot; now is
// the call's ARGV[1], the clock around which a calendar's bounds are
// given ("" for this process's).
func encode(es []*entry, now string) (keys []string, specs, prog []byte) {
	nowMs, err := strconv.ParseInt(now, 10, 64)
	if err != nil {
		nowMs = time.Now().UnixMilli()
	}
	n, size := 0, 0
	for _, e := range es {
		n += len(e.keys)
		size += entrySize + hitSize*len(e.hits) + undoSize + undoKeySize*len(e.undo)/2
	}
	keys = make([]string, 0, n)
	specs = make([]byte, 0, specSize*n)
	prog = make([]byte, 0, size)
	var index map[string]int
	if n > 16 {
		index = make(map[string]int, n)
	}
	idx := make([]uint16, 0, 8)
	for _, e := range es {
		idx = idx[:0]
		for i, k := range e.keys {
			j := -1
			if index != nil {
				if v, ok := index[k]; ok {
					j = v
				}
			} else {
				j = slices.Index(keys, k)
			}
			if j < 0 {
				j = len(keys)
				keys = append(keys, k)
				specs = appendSpec(specs, e.specs[i], nowMs)
				if index != nil {
					index[k] = j
				}
			}
			idx = append(idx, uint16(j+1))
		}
		prog = e.appendTo(prog, idx)
	}
	return keys, specs, prog
}

// appendSpec appends s as fmtSpec, and a calendar's fmtBound around nowMs.
func appendSpec(b []byte, s keySpec, nowMs int64) []byte {
	alg := s.alg
	if s.pen.On() {
		alg |= penaltyBit
	}
	b = append(b, alg)
	b = appendF(b, s.window)
	if s.cal.Unit == limiter.CalendarNone {
		b = append(b, s.subs)
	} else {
		b = append(b, limiter.CalendarBounds)
		for _, x := range s.cal.Bounds(nowMs) {
			b = appendF(b, float64(x))
		}
	}
	if s.pen.On() {
		p := s.pen
		b = appendF(appendF(b, float64(p.Block.Milliseconds())), float64(p.Escalate))
		b = appendF(appendF(b, float64(p.Max.Milliseconds())), float64(p.Forget.Milliseconds()))
	}
	return b
}

func appendF(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// appendTo appends e's program (fmtEntry, then fmtUndo and fmtUndoKey per
// counter, or fmtHit per hit), with idx the 1-based KEYS index of each of
// its keys.
func (e *entry) appendTo(b []byte, idx []uint16) []byte {
	le := binary.LittleEndian
	if e.kind == kindUndo {
		nk := len(e.undo) / 2
		b = le.AppendUint16(append(b, kindUndo), uint16(nk))
		marker := uint16(0)
		if e.ttl > 0 {
			marker = idx[len(idx)-1]
		}
		b = appendF(le.AppendUint16(b, marker), e.ttl)
		for k := range nk {
			key := k
			if e.undoKey != nil {
				key = e.undoKey[k]
			}
			b = le.AppendUint16(b, idx[key])
			b = appendF(appendF(b, e.undo[2*k]), e.undo[2*k+1])
		}
		return b
	}
	kind := e.kind
	if e.full {
		kind |= kindFull
	}
	if e.lease {
		kind |= kindLease
	}
	b = le.AppendUint16(append(b, kind), uint16(len(e.hits)))
	for _, h := range e.hits {
		b = le.AppendUint16(b, idx[h.key])
		b = appendF(appendF(appendF(b, h.requests), h.burst), h.hits)
		b = appendF(appendF(appendF(append(b, h.flags), h.lease), h.ceiling), h.token)
	}
	return b
}
