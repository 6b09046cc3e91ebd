package descriptors

import "time"

// MaxWindow is the longest window a limit may have (unit x unit_multiplier):
// 10 years. TEMPORARY: the config seam defines and enforces it.
const MaxWindow = 10 * 365 * 24 * time.Hour
