package descriptors

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math"
	"reflect"
	"slices"
)

// Version identifies c by its content: the first 12 hex digits of the
// SHA-256 of every domain of c, in name order, with every exported field of
// every value it holds (its rules, limits, pools and classes, their
// positions and files included), walked field by field, so that two
// Configs that differ in anything built differ in version, and a field
// added to the model counts without a word here. Replicas that loaded the
// same files show the same version; a build of Sluice that changes the
// model may change every version. It is computed once per Config, is safe
// for concurrent use, and is "" for a nil Config.
func (c *Config) Version() string {
	if c == nil {
		return ""
	}
	if c.version == nil { // a Config that Build did not make
		return c.fingerprint()
	}
	return c.version()
}

// fingerprint computes Version.
func (c *Config) fingerprint() string {
	w := &versionWriter{h: sha256.New(), seen: make(map[seenKey]int)}
	w.value(reflect.ValueOf(c.sorted))
	sum := w.h.Sum(nil)
	return hex.EncodeToString(sum[:6])
}

// versionWriter writes values into a hash, each as its kind followed by
// its contents, unambiguously: lengths before strings and lists, field
// names before fields, a marker for nil, and a back reference for a pointer
// met before (a rule's Lineage, a class's pool), so that the walk ends and
// every pointer counts once.
type versionWriter struct {
	h    hash.Hash
	seen map[seenKey]int // pointer -> the order in which it was first met
	buf  [8]byte
}

// seenKey is a pointer met, by type as well as address: a struct and its
// first field share an address.
type seenKey struct {
	t    reflect.Type
	addr uintptr
}

func (w *versionWriter) byte(b byte) { w.h.Write([]byte{b}) }

func (w *versionWriter) uint(n uint64) {
	binary.LittleEndian.PutUint64(w.buf[:], n)
	w.h.Write(w.buf[:])
}

func (w *versionWriter) string(s string) {
	w.uint(uint64(len(s)))
	w.h.Write([]byte(s))
}

func (w *versionWriter) value(v reflect.Value) {
	w.byte(byte(v.Kind()))
	switch v.Kind() {
	case reflect.Pointer:
		w.pointer(v)
	case reflect.Interface:
		if v.IsNil() {
			w.byte(0)
			return
		}
		w.byte(1)
		w.string(v.Elem().Type().String())
		w.value(v.Elem())
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				w.string(f.Name)
				w.value(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		w.uint(uint64(v.Len()))
		for i := range v.Len() {
			w.value(v.Index(i))
		}
	case reflect.Map:
		w.mapValue(v)
	case reflect.String:
		w.string(v.String())
	case reflect.Bool:
		if v.Bool() {
			w.byte(1)
		} else {
			w.byte(0)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		w.uint(uint64(v.Int()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		w.uint(v.Uint())
	case reflect.Float32, reflect.Float64:
		w.uint(math.Float64bits(v.Float()))
	default: // nothing of the model is a func, chan or complex; count it anyway
		w.string(fmt.Sprint(v.Interface()))
	}
}

// pointer writes nil, a back reference to a pointer met before, or the
// value pointed to.
func (w *versionWriter) pointer(v reflect.Value) {
	if v.IsNil() {
		w.byte(0)
		return
	}
	k := seenKey{v.Type(), v.Pointer()}
	if n, ok := w.seen[k]; ok {
		w.byte(2)
		w.uint(uint64(n))
		return
	}
	w.seen[k] = len(w.seen)
	w.byte(1)
	w.value(v.Elem())
}

// mapValue writes a map's entries in the order of their keys' type and
// text, which for metadata (string keys) is the keys' order.
func (w *versionWriter) mapValue(v reflect.Value) {
	type entry struct {
		text string
		k    reflect.Value
	}
	entries := make([]entry, 0, v.Len())
	for _, k := range v.MapKeys() {
		entries = append(entries, entry{fmt.Sprintf("%T:%v", k.Interface(), k.Interface()), k})
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.text, b.text) })
	w.uint(uint64(len(entries)))
	for _, e := range entries {
		w.value(e.k)
		w.value(v.MapIndex(e.k))
	}
}
