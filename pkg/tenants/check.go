package tenants

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/pkg/descriptors"
)

// Check returns an error naming what is wrong with a row that is to be
// written to table under cfg: a table no rule names (tenants_from), an
// empty value or one longer than MaxValueBytes, a row that does not parse
// (a limit without a unit, ...) or that names a plan one of the table's
// rules lacks.
func Check(cfg *descriptors.Config, table, value, row string) error {
	rules, err := tableRules(cfg, table)
	if err != nil {
		return err
	}
	return checkRow(rules, value, row)
}

// tableRules returns the rules naming table, or an error when there are
// none or the name is not a table's.
func tableRules(cfg *descriptors.Config, table string) ([]*descriptors.Rule, error) {
	if !descriptors.ValidTableName(table) {
		return nil, fmt.Errorf("table %q: want 1 to 64 letters, digits, '_', '.' or '-'", table)
	}
	rules := cfg.TenantRules(table)
	if len(rules) == 0 {
		return nil, fmt.Errorf("table %q: no rule of the config names it in tenants_from", table)
	}
	return rules, nil
}

func checkRow(rules []*descriptors.Rule, value, row string) error {
	if value == "" {
		return errors.New("value: empty")
	}
	if len(value) > MaxValueBytes {
		return fmt.Errorf("value %.20q...: %d bytes, longer than the longest entry value, %d", value, len(value), MaxValueBytes)
	}
	r, err := descriptors.ParseTenantRow(row)
	if err != nil {
		return fmt.Errorf("value %q: %w", value, err)
	}
	for _, rule := range rules {
		if err := rule.CheckTenantRow(r); err != nil {
			return fmt.Errorf("value %q: %w", value, err)
		}
	}
	return nil
}

// CheckAll checks every row as Check does and returns every problem (at
// most 20, then how many more), each naming its line or value.
func CheckAll(cfg *descriptors.Config, table string, rows [][2]string) error {
	rules, err := tableRules(cfg, table)
	if err != nil {
		return err
	}
	var errs []error
	n := 0
	for _, r := range rows {
		if err := checkRow(rules, r[0], r[1]); err != nil {
			if n++; n <= 20 {
				errs = append(errs, err)
			}
		}
	}
	if n > 20 {
		errs = append(errs, fmt.Errorf("and %d more", n-20))
	}
	return errors.Join(errs...)
}

// ReadRows reads rows to import: CSV (format "csv", a value and its row
// per line, the row's commas unquoted or quoted, an optional first line
// "value,row") or YAML ("yaml", a mapping of values to rows).
func ReadRows(r io.Reader, format string) ([][2]string, error) {
	switch strings.ToLower(format) {
	case "csv":
		return readCSV(r)
	case "yaml", "yml":
		var m yaml.Node
		if err := yaml.NewDecoder(r).Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil
			}
			return nil, fmt.Errorf("yaml: %w", err)
		}
		if len(m.Content) == 0 || m.Content[0].Kind != yaml.MappingNode {
			return nil, errors.New("yaml: want a mapping of values to rows")
		}
		c := m.Content[0].Content
		rows := make([][2]string, 0, len(c)/2)
		for i := 0; i+1 < len(c); i += 2 {
			if c[i+1].Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("yaml line %d: value %q: want a row (a plan's name or limits), got a %s", c[i+1].Line, c[i].Value, c[i+1].Tag)
			}
			rows = append(rows, [2]string{c[i].Value, c[i+1].Value})
		}
		return rows, nil
	}
	return nil, fmt.Errorf("format %q: want csv or yaml", format)
}

func readCSV(r io.Reader) ([][2]string, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	var rows [][2]string
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("csv: %w", err)
		}
		if line == 1 && len(rec) == 2 && rec[0] == "value" && rec[1] == "row" {
			continue
		}
		if len(rec) < 2 {
			return nil, fmt.Errorf("csv line %d: want value,row", line)
		}
		rows = append(rows, [2]string{rec[0], strings.Join(rec[1:], ",")})
	}
}
