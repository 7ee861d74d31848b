package fleet_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// TestMain silences go-redis's internal logger, which reports every
// Sentinel lookup and reconnection the tests cause on purpose.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}
