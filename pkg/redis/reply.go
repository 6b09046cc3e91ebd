package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"

	goredis "github.com/redis/go-redis/v9"
)

// The reply of a script call, read against the layout of protocol.go.

// reader reads a reply's little-endian fields.
type reader struct {
	s   string
	off int
	err error
}

func (r *reader) f64() float64 {
	if r.off+8 > len(r.s) {
		r.err = errShortReply
		return 0
	}
	s := r.s[r.off : r.off+8]
	r.off += 8
	return math.Float64frombits(uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56)
}

func (r *reader) u8() byte {
	if r.off >= len(r.s) {
		r.err = errShortReply
		return 0
	}
	r.off++
	return r.s[r.off-1]
}

func (r *reader) u16() int {
	return int(r.u8()) | int(r.u8())<<8
}

// message reads fmtMessage and the message after it.
func (r *reader) message() string {
	n := r.u16()
	if r.err != nil || r.off+n > len(r.s) {
		r.err = errShortReply
		return ""
	}
	r.off += n
	return r.s[r.off-n : r.off]
}

var errShortReply = errors.New("redis: limiter script reply too short")

// decode reads the reply of the call that decided es into each entry: an
// entry that raised an error in the script gets it in its err, the others
// their replies. The error is the reply's, when it does not hold the
// replies of es.
func decode(reply any, es []*entry) error {
	s, ok := reply.(string)
	if !ok {
		return fmt.Errorf("redis: limiter script reply is a %T, want a string", reply)
	}
	r := reader{s: s}
	now := r.f64()
	for _, e := range es {
		e.now, e.err = now, nil
		if e.kind == kindUndo {
			if e.changed = r.f64(); e.changed == undoFailed {
				e.err = fmt.Errorf("redis: limiter script: undo failed: %s", r.message())
			}
			continue
		}
		switch r.u8() {
		case entryFailed:
			e.err = fmt.Errorf("redis: limiter script: entry of %d hits failed: %s", len(e.hits), r.message())
			continue
		case 1:
			e.admitted = true
		default:
			e.admitted = false
		}
		e.decodeHits(&r)
	}
	if r.err == nil && r.off != len(s) {
		r.err = fmt.Errorf("redis: limiter script reply has %d bytes, read %d", len(s), r.off)
	}
	return r.err
}

// decodeHits reads the hits and keys of e's reply after its fmtAdmitted.
func (e *entry) decodeHits(r *reader) {
	e.hr = slices.Grow(e.hr[:0], len(e.hits))[:len(e.hits)]
	for i := range e.hits {
		bits := r.u8()
		v := hitReply{allowed: bits&1 != 0, exceeds: bits&2 != 0, blocked: bits&4 != 0, retry: r.f64(), remDenied: r.f64(), resetDenied: r.f64()}
		if e.full {
			v.remAdmitted, v.resetAdmitted = r.f64(), r.f64()
		} else {
			// The short reply's pair is the outcome's.
			v.remAdmitted, v.resetAdmitted = v.remDenied, v.resetDenied
		}
		e.hr[i] = v
	}
	if !e.full && !e.lease {
		return
	}
	nk := len(e.keys)
	e.kr = slices.Grow(e.kr[:0], nk)[:nk]
	for k := range nk {
		if e.full {
			e.kr[k] = keyReply{u1: r.f64(), u2: r.f64(), leased: r.f64()}
			if n := int(r.u8()); n > 0 {
				e.kr[k].more = make([]float64, 2*n)
				for j := range e.kr[k].more {
					e.kr[k].more[j] = r.f64()
				}
			}
		} else {
			e.kr[k] = keyReply{u1: r.f64(), leased: r.f64()}
		}
	}
}

// isReply reports whether err is an error reply from Redis (the node
// answered), as opposed to a network error or a timeout.
func isReply(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && !isTimeout(err)
}

// isTimeout reports whether err is a deadline or a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
