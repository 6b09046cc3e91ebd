package descriptors

import (
	"time"

	"github.com/sluicehq/sluice/pkg/limiter"
	"gopkg.in/yaml.v3"
)

// PenaltyNode is rate_limit.penalty (a Sluice addition): once the limit
// denies a key, the key stays over the limit for block, each further
// offence within forget of the last block multiplying it by escalate, up to
// max (limiter.Penalty).
type PenaltyNode struct {
	// Pos is where the mapping is, for an error about a missing block.
	Pos Pos
	// Block, Max and Forget are durations ("10m", "24h"); Escalate an
	// integer.
	Block, Max, Forget Field[string]
	Escalate           Field[uint32]
}

// penaltyKeys are the keys of rate_limit.penalty.
var penaltyKeys = []string{"block", "escalate", "max", "forget"}

// penalty decodes rate_limit.penalty at path.
func (p *decoder) penalty(n *yaml.Node, path string, depth int) (*PenaltyNode, bool) {
	m, ok := p.mapping(n, path, "a mapping {block: 10m, escalate: 2, max: 24h, forget: 24h}", penaltyKeys, depth+1)
	if !ok {
		return nil, false
	}
	return &PenaltyNode{Pos: p.posOf(m.node), Block: get(p, m, "block", path, p.str), Max: get(p, m, "max", path, p.str),
		Forget: get(p, m, "forget", path, p.str), Escalate: get(p, m, "escalate", path, p.uint32(1))}, true
}

// penalty fills l.Penalty from rl's penalty at path: block positive,
// escalate 1 or more (default 1), max at least block (default block),
// forget 0 or more (default 0); not on an algorithm that counts requests
// in flight nor on a pool's class.
func (b *builder) penalty(rl *RateLimitNode, l *Limit, path string) {
	f := rl.Penalty
	if state(b, f, path+".penalty") != FieldSet || f.Value == nil {
		return
	}
	path += ".penalty"
	if l.Algorithm.Traits().InFlight {
		b.errorAt(f.KeyPos, path, "penalty with algorithm %s (only a rate limit blocks repeat offenders)", l.Algorithm)
		return
	}
	if rl.Cache.State == FieldSet && rl.Cache.Value {
		b.errorAt(f.KeyPos, path, "penalty with cache: true (a block is kept in the store, which a cached decision does not ask)")
		return
	}
	n := f.Value
	p := limiter.Penalty{Escalate: 1}
	dur := func(fd Field[string], key string, lo time.Duration, want string) (time.Duration, bool) {
		if state(b, fd, path+"."+key) != FieldSet {
			return 0, fd.State == FieldAbsent
		}
		d, err := time.ParseDuration(fd.Value)
		if err != nil || d < lo || d > limiter.MaxPenalty || d%time.Millisecond != 0 {
			b.errorAt(fd.Pos, path+"."+key, "%s %s (want %s, whole milliseconds, at most %v)", key, quote(fd.Value), want, limiter.MaxPenalty)
			return 0, false
		}
		return d, true
	}
	var okB, okM, okF bool
	p.Block, okB = dur(n.Block, "block", time.Millisecond, "a duration above 0: 10m")
	p.Max, okM = dur(n.Max, "max", 0, "a duration, at least block: 24h")
	p.Forget, okF = dur(n.Forget, "forget", 0, "a duration, 0 or more: 24h")
	ok := okB && okM && okF
	if n.Block.State == FieldAbsent {
		b.errorAt(n.Pos, path+".block", "missing block (the first offence's block: 10m)")
		ok = false
	}
	if state(b, n.Escalate, path+".escalate") == FieldSet {
		if n.Escalate.Value < 1 {
			b.errorAt(n.Escalate.Pos, path+".escalate", "escalate %d (want 1 or more: each offence's block is the last one's times escalate)", n.Escalate.Value)
			ok = false
		}
		p.Escalate = n.Escalate.Value
	}
	if n.Max.State == FieldAbsent {
		p.Max = p.Block
	}
	if ok && p.Max < p.Block {
		b.errorAt(n.Max.Pos, path+".max", "max %v below block %v", p.Max, p.Block)
		ok = false
	}
	if ok {
		l.Penalty = p
	}
}

// showPenalty is what /config shows of a limit's penalty.
func showPenalty(l *Limit) any {
	p := l.Penalty
	if !p.On() {
		return nil
	}
	return []KeyValue{{"block", p.Block.String()}, {"escalate", p.Escalate}, {"max", p.Max.String()}, {"forget", p.Forget.String()}}
}
