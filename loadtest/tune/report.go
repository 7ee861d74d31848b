package tune

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/sluicehq/sluice/loadtest/report"
)

// WriteReport writes the session into dir: tune.json, report.html with the
// curve and the knee (curve.png, latency-curve.png), and the verification
// run's own report in dir/verify.
func WriteReport(dir string, res *Result) error {
	if err := report.WriteJSON(dir, "tune.json", res); err != nil {
		return err
	}
	steps := append([]Step(nil), res.Steps...)
	sort.Slice(steps, func(i, j int) bool { return steps[i].Rate < steps[j].Rate })
	x, good, p99, slo := make([]float64, len(steps)), make([]float64, len(steps)), make([]float64, len(steps)), make([]float64, len(steps))
	for i, s := range steps {
		x[i], good[i], p99[i], slo[i] = s.Rate, s.Goodput, s.P99MS, res.SLOMS
	}
	knee := []report.Mark{{X: res.Knee.Rate, Label: fmt.Sprintf("knee %.1f/s", res.Knee.Rate)}}
	r := res.Recommendation
	p := report.Page{
		Title: "sluice tune: " + res.Target,
		Facts: [][2]string{
			{"objective", fmt.Sprintf("p99 <= %.1f ms", res.SLOMS)},
			{"knee", fmt.Sprintf("%.1f/s, goodput %.1f/s, p99 %.1f ms", res.Knee.Rate, res.Knee.Goodput, res.Knee.P99MS)},
			{"no-load latency", fmt.Sprintf("%.1f ms (mean at the lowest step)", res.NoLoadMS)},
			{"peak goodput", fmt.Sprintf("%.1f/s", res.PeakGoodput)},
			{"concurrency (Little's law)", fmt.Sprintf("%d", res.Concurrency)},
			{"ramp stopped", res.Stopped},
			{"recommended", fmt.Sprintf("%s limit %d [%d, %d]; queue %d, max wait %.0f ms; static cap %d",
				r.Algorithm, r.InitialLimit, r.MinLimit, r.MaxLimit, r.QueueSize, r.QueueWaitMS, r.StaticCap)},
		},
		Charts: []report.Chart{
			{File: "curve.png", Title: "Throughput by offered rate", XLabel: "offered requests/s", YLabel: "good requests/s", Points: true, Marks: knee,
				Series: []report.Series{{Name: "offered", X: x, Y: x, Dashed: true}, {Name: "goodput", X: x, Y: good}}},
			{File: "latency-curve.png", Title: "p99 latency by offered rate", XLabel: "offered requests/s", YLabel: "ms", Points: true, Marks: knee,
				Series: []report.Series{{Name: "p99", X: x, Y: p99}, {Name: "objective", X: x, Y: slo, Dashed: true}}},
		},
	}
	if v := res.Verification; v != nil {
		verdict := "meets the objective"
		if !v.MeetsSLO {
			verdict = "misses the objective: " + v.Why
		}
		p.Facts = append(p.Facts, [2]string{"verification", fmt.Sprintf("%.1f/s (3x the knee) through sluice: goodput %.1f/s, p99 %.1f ms, %d rejected (%d with 429); %s (report in verify/)",
			v.Rate, v.Goodput, v.P99MS, v.Rejected, v.Quota, verdict)})
		if cl := v.ClosedLoop; cl != nil {
			p.Facts = append(p.Facts, [2]string{"closed loop", fmt.Sprintf("%d clients that send again when answered: %.1f/s directly, %.1f/s through sluice (%.0f%%), %d refused",
				cl.Clients, cl.Direct, cl.Through, 100*cl.Ratio, cl.Refused)})
		}
	}
	p.Notes = []string{"The recommended configuration, with where each value came from, is in sluice.recommended.yaml."}
	if err := report.Write(dir, p); err != nil {
		return err
	}
	if s := res.VerifySummary(); s != nil {
		return report.WriteRun(filepath.Join(dir, "verify"), s)
	}
	return nil
}
