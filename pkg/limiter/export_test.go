package limiter

// EvictionRemaining returns what MemoryStore's eviction reads of s, written
// under l, at nowMs: the remaining of report on roll (for an allowed hit),
// with l's capacity.
func EvictionRemaining(s State, nowMs int64, l Limit) (remaining, capacity uint64) {
	a := algorithms[l.Algorithm]
	remaining, _ = a.report(a.roll(s, nowMs, l), nowMs, l, true)
	return remaining, a.capacity(l)
}
