package descriptors

import (
	"reflect"
	"testing"
)

func loadVersioned(t *testing.T) *Config {
	t.Helper()
	cfg, err := Parse(everyKey...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestVersionStable: the same files give the same version, in one process
// and across loads, whatever the order of a map's keys; another file name
// gives another. everyKey (schema_test.go) sets every part of the model.
func TestVersionStable(t *testing.T) {
	a, b := loadVersioned(t), loadVersioned(t)
	if len(a.Version()) != 12 || a.Version() != b.Version() || a.Version() != a.fingerprint() {
		t.Errorf("versions %q, %q, %q: want the same 12 hex digits", a.Version(), b.Version(), a.fingerprint())
	}
	for range 20 { // map iteration order changes from one walk to the next
		if v := b.fingerprint(); v != a.Version() {
			t.Fatalf("fingerprint = %q, then %q", a.Version(), v)
		}
	}
	other, err := Parse(Source{Name: "other.yaml", Data: everyKey[0].Data})
	if err != nil {
		t.Fatal(err)
	}
	if other.Version() == a.Version() {
		t.Errorf("the same rules from another file: version %q, want another", other.Version())
	}
	if (*Config)(nil).Version() != "" {
		t.Errorf("nil Config: version %q, want empty", (*Config)(nil).Version())
	}
}

// TestVersionSeesEveryField changes each exported field of a domain, a
// rule, a limit, a pool and a class in turn and checks that the version
// changes: a field added to the model counts without a word in Version.
// It also checks that those are every struct the model holds.
func TestVersionSeesEveryField(t *testing.T) {
	cfg := loadVersioned(t)
	d := cfg.Domain("every")
	pool := d.Rules[0]
	pool.Changes = []Change{{By: "overlay.yaml:3", Keys: []string{"classes"}}}
	instances := map[reflect.Type]reflect.Value{}
	for _, x := range []any{d, pool, pool.Limit, pool.Pool, pool.Pool.Classes[1], &pool.Changes[0], d.Rules[3].Plans[0]} {
		v := reflect.ValueOf(x).Elem()
		instances[v.Type()] = v
	}
	for _, typ := range modelStructs(reflect.TypeOf(d)) {
		if _, ok := instances[typ]; !ok {
			t.Errorf("the model holds a %s that this test does not change: add one to instances", typ)
		}
	}
	before := cfg.fingerprint()
	for typ, v := range instances {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			old := reflect.New(f.Type).Elem()
			old.Set(v.Field(i))
			change(v.Field(i))
			if got := cfg.fingerprint(); got == before {
				t.Errorf("changing %s.%s left the version at %s", typ.Name(), f.Name, got)
			}
			v.Field(i).Set(old)
		}
	}
	if got := cfg.fingerprint(); got != before {
		t.Fatalf("version after restoring every field = %s, want %s", got, before)
	}
}

// change changes v, whatever its kind, to a value that differs.
func change(v reflect.Value) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		} else {
			v.SetZero()
		}
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Map: // a copy with one more key: the map may be shared
		m := reflect.MakeMap(v.Type())
		for _, k := range v.MapKeys() {
			m.SetMapIndex(k, v.MapIndex(k))
		}
		m.SetMapIndex(reflect.ValueOf("added").Convert(v.Type().Key()), reflect.Zero(v.Type().Elem()))
		v.Set(m)
	case reflect.Struct: // a value of another package (limiter.Penalty): its first field
		change(v.Field(0))
	default:
		panic("change: no change for a " + v.Kind().String())
	}
}

// modelStructs lists the struct types of this package reachable from t
// through exported fields.
func modelStructs(t reflect.Type) []reflect.Type {
	seen := map[reflect.Type]bool{}
	var out []reflect.Type
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			walk(t.Elem())
		case reflect.Struct:
			if seen[t] || t.PkgPath() != reflect.TypeOf(Config{}).PkgPath() {
				return
			}
			seen[t] = true
			out = append(out, t)
			for i := range t.NumField() {
				if t.Field(i).IsExported() {
					walk(t.Field(i).Type)
				}
			}
		}
	}
	walk(t)
	return out
}
