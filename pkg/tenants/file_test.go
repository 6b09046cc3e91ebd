package tenants

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestFile: the tables of a YAML file are read, written back by Set and
// Delete, and a change made to the file by hand is reported as a Reset.
func TestFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := f.Row(ctx, "api", "acme"); ok {
		t.Fatal("a row in a file that does not exist")
	}
	if err := f.Set(ctx, "api", map[string]string{"acme": "pro", "big": "50000/minute"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(ctx, "api", "big"); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := f.Row(ctx, "api", "acme"); r != "pro" || !ok || err != nil {
		t.Errorf("Row(acme) = %q, %v, %v", r, ok, err)
	}
	if _, ok, _ := f.Row(ctx, "api", "big"); ok {
		t.Error("big still has a row after Delete")
	}
	if err := os.WriteFile(path, []byte("api:\n  acme: gold\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changes, _, err := f.Changes(ctx, "")
	if err != nil || len(changes) != 1 || !changes[0].Reset {
		t.Fatalf("Changes after an edit = %v, %v; want one Reset", changes, err)
	}
	if r, _, _ := f.Row(ctx, "api", "acme"); r != "gold" {
		t.Errorf("Row(acme) after the edit = %q, want gold", r)
	}
	if err := os.WriteFile(path, []byte("api: [not, a, mapping\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Changes(ctx, ""); err == nil {
		t.Error("a broken file: no error from Changes")
	}
	if r, _, _ := f.Row(ctx, "api", "acme"); r != "gold" {
		t.Errorf("Row(acme) with the file broken = %q, want gold (last read)", r)
	}
}
