package daemon_test

import "github.com/sluicehq/sluice/sidecar/internal/sidecartest"

// The tests' shared helpers (see sidecartest).
var (
	newEngine = sidecartest.Engine
	ok        = sidecartest.OK
	do        = sidecartest.Do
)

const twoPerMinute = sidecartest.TwoPerMinute
