package redis

import (
	"time"
)

// slowRounds and minSlow say when a call in flight is slow: out longer than
// slowRounds round trip estimates (gate.roundTrip), and at least minSlow, so
// that the scheduling delays of a loaded host, a millisecond or so, do not
// open a call per hiccup and undo the batching. The decisions queued behind
// a slow call then go in a call of their own (while fewer than node.most are
// in flight): a call of hundreds of counters, a reply that waits unread,
// or a network that drops a packet holds up only the decisions in it.
const (
	slowRounds = 4
	minSlow    = time.Millisecond
)

// newNode returns n (its client, gate and limits set) ready for calls.
func newNode(n *node) *node {
	n.out = make([]int64, n.most)
	n.timer = time.AfterFunc(time.Hour, n.tick)
	n.timer.Stop()
	return n
}

// slowAfter is how long a call may be out before it is slow.
func (n *node) slowAfter() time.Duration {
	return max(slowRounds*n.gate.roundTrip(), minSlow)
}

// answering reports whether the node answered a call within stallQuiet of
// now: a slow call on a node that answers is that call's (its size, a reply
// read late), and another call helps; on a node that answers nothing (down,
// paused, restarting) more calls would only pile up connections and
// scripts that run late, so none opens.
func (n *node) answering(now time.Time) bool {
	return !n.gate.stalled.Load() && now.UnixNano()-n.gate.lastReply.Load() < int64(stallQuiet)
}

// oldest returns the Unix ns at which the oldest call in flight was sent,
// other than lane skip's (-1: none skipped), and false when there is none.
// n.mu is held.
func (n *node) oldest(skip int) (int64, bool) {
	var first int64
	for l, at := range n.out {
		if at != 0 && l != skip && (first == 0 || at < first) {
			first = at
		}
	}
	return first, first != 0
}

// dispatch makes the queue's next call on a lane of its own when a lane
// may open: fewer than flying calls in flight, or fewer than most, the node
// answering and the oldest slow at now. Otherwise, with entries queued
// behind calls in flight that may turn slow, it arms the timer for then
// (when none may open, a call's return takes the queue). n.mu is held.
func (n *node) dispatch(now time.Time) {
	if len(n.queue) == 0 {
		return
	}
	if n.active >= n.flying {
		if n.active >= n.most || !n.answering(now) {
			return // a call's return takes the queue
		}
		first, _ := n.oldest(-1)
		if wait := first + int64(n.slowAfter()) - now.UnixNano(); wait > 0 {
			if !n.armed {
				n.armed = true
				n.timer.Reset(time.Duration(wait))
			}
			return
		}
	}
	batch := n.take()
	if len(batch) == 0 {
		return // every waiter left
	}
	l := 0
	for n.out[l] != 0 {
		l++
	}
	n.out[l] = now.UnixNano()
	n.active++
	go n.flush(l, batch)
}

// tick is the timer's: the oldest call in flight may have turned slow.
func (n *node) tick() {
	n.mu.Lock()
	n.armed = false
	n.dispatch(time.Now())
	n.mu.Unlock()
}

// flush sends batch on lane l, then what queued meanwhile, until the queue
// is empty, or until the node has more than flying calls in flight and no
// other is slow (the others, answering in time, take the queue: a lane
// opened for a slow call closes once it is not needed).
func (n *node) flush(l int, batch []*pending) {
	for len(batch) > 0 {
		n.send(batch)
		n.mu.Lock()
		now := time.Now()
		batch = nil
		if first, busy := n.oldest(l); n.active <= n.flying || busy && now.UnixNano()-first >= int64(n.slowAfter()) && n.answering(now) {
			batch = n.take()
		}
		if len(batch) == 0 {
			n.out[l] = 0
			n.active--
			n.dispatch(now)
		} else {
			n.out[l] = now.UnixNano()
		}
		n.mu.Unlock()
	}
}
