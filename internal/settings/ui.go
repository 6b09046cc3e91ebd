package settings

import "fmt"

// UISettings are the status page's settings (rows in the settings table).
type UISettings struct {
	UI          bool
	UITopValues int
	UISensitive string
}

// validateOps checks the status page's and the tracing settings.
func (s *Settings) validateOps() error {
	if s.UITopValues < 0 || s.UITopValues > 100 {
		return fmt.Errorf("--ui-top-values: %d is not in 0..100", s.UITopValues)
	}
	return s.TracingSettings.validate()
}
