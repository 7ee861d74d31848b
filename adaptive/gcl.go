package adaptive

import (
	"fmt"
	"math"
	"strings"

	gclcore "github.com/platinummonkey/go-concurrency-limits/core"
	gcllimit "github.com/platinummonkey/go-concurrency-limits/limit"
)

// GCL runs one of github.com/platinummonkey/go-concurrency-limits' limit
// algorithms (its own core.Limit, not a copy) inside a Limiter: sluice
// admits, keeps the sample windows, the bounds, the probes and the stall
// detection; each closed window is handed to the package's OnSample as its
// WindowedLimit would hand it (the window's average RTT, the most requests
// in flight, whether any dropped), and its estimate becomes the limit. It
// is for users of that package who move to sluice and keep their
// algorithm. The package keeps its own estimate: where sluice moves the
// limit itself (a stall, the end of a probe), the next window's estimate
// wins again. A GCL holds state: use one per Limiter.
type GCL struct {
	name string
	lim  gclcore.Limit
}

// gclNames are the algorithms GCL runs, by configuration name.
var gclNames = [...]string{"gcl-vegas", "gcl-gradient2", "gcl-gradient", "gcl-aimd"}

// NewGCL returns the go-concurrency-limits algorithm called name (gcl-vegas,
// gcl-gradient2, gcl-gradient, gcl-aimd), with that package's defaults. Its
// limit starts at the Limiter's at the first window.
func NewGCL(name string) (*GCL, error) {
	for _, n := range gclNames {
		if n == name {
			return &GCL{name: name}, nil
		}
	}
	return nil, fmt.Errorf("unknown go-concurrency-limits algorithm %q (want %s)", name, strings.Join(gclNames[:], ", "))
}

func (g *GCL) start(initial int) {
	reg, log := gclcore.EmptyMetricRegistryInstance, gcllimit.NoopLimitLogger{}
	switch g.name {
	case "gcl-vegas":
		g.lim = gcllimit.NewDefaultVegasLimitWithLimit(g.name, initial, log, reg)
	case "gcl-gradient2":
		g.lim, _ = gcllimit.NewGradient2Limit(g.name, initial, 1_000_000, 1, nil, 0.2, 600, log, reg)
	case "gcl-gradient":
		g.lim = gcllimit.NewGradientLimitWithRegistry(g.name, initial, 1, 1_000_000, 0.2, nil, 2.0, 0, log, reg)
	default:
		g.lim = gcllimit.NewAIMDLimit(g.name, initial, 0.9, 1, reg)
	}
}

// Update implements Algorithm.
func (g *GCL) Update(limit float64, s Sample) float64 {
	if g.lim == nil {
		g.start(int(math.Max(1, limit)))
	}
	rtt := s.Mean
	if rtt <= 0 {
		rtt = s.RTT
	}
	g.lim.OnSample(s.At.UnixNano(), int64(rtt), s.MaxInFlight, s.Drops > 0)
	return float64(g.lim.EstimatedLimit())
}

// Name returns the configuration name, e.g. "gcl-vegas".
func (g *GCL) Name() string { return g.name }
