package redis

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
