package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// riverMetrics are the river plot's panels: what a job costs on each
// side against the concurrency.
var riverMetrics = []struct {
	title, unit string
	value       func(workerResult) float64
}{
	{"throughput", "jobs/s", func(r workerResult) float64 { return r.JobsPerSec }},
	{"handler p99", "ms", func(r workerResult) float64 { return r.P99Ms }},
	{"WAL syncs per job (cluster-wide)", "WAL syncs/job", func(r workerResult) float64 { _, s := r.perJob(); return s }},
}

// riverConcurrencies is the distinct concurrencies of rounds, ascending.
func riverConcurrencies(rounds []riverRound) []int {
	var cs []int
	for _, r := range rounds {
		cs = append(cs, r.Concurrency)
	}
	slices.Sort(cs)
	return slices.Compact(cs)
}

// riverPoints is, for one side, the median over the rounds of metric at
// each concurrency: with -rounds 2 or more, one slow round does not bend
// the line.
func riverPoints(rounds []riverRound, side func(riverRound) workerResult, metric func(workerResult) float64) plotter.XYs {
	var xys plotter.XYs
	for _, c := range riverConcurrencies(rounds) {
		var vs []float64
		for _, r := range rounds {
			if r.Concurrency == c {
				vs = append(vs, metric(side(r)))
			}
		}
		slices.Sort(vs)
		xys = append(xys, plotter.XY{X: float64(c), Y: vs[len(vs)/2]})
	}
	return xys
}

// riverPlot draws throughput, handler p99 and WAL syncs per job against
// the concurrency, one line per side: river.png in dir, three panels side
// by side. It draws nothing, and returns "", for rounds at fewer than two
// concurrencies.
func riverPlot(rounds []riverRound, dir string) (string, error) {
	cs := riverConcurrencies(rounds)
	if len(cs) < 2 {
		return "", nil
	}
	sides := []struct {
		name  string
		color color.Color
		get   func(riverRound) workerResult
	}{
		{"idemgate", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, func(r riverRound) workerResult { return r.Idemgate }},
		{"River", color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}, func(r riverRound) workerResult { return r.River }},
	}
	var ticks []plot.Tick
	for _, c := range cs {
		ticks = append(ticks, plot.Tick{Value: float64(c), Label: strconv.Itoa(c)})
	}
	var panels []*plot.Plot
	for _, m := range riverMetrics {
		pl := plot.New()
		pl.Title.Text = m.title
		pl.X.Label.Text = "concurrency (asynq concurrency, River MaxWorkers)"
		pl.Y.Label.Text = m.unit
		pl.X.Scale = plot.LogScale{} // concurrencies are at least 1
		pl.X.Tick.Marker = plot.ConstantTicks(ticks)
		pl.Y.Min = 0
		pl.Legend.Top, pl.Legend.Left = true, true
		for _, s := range sides {
			l, pts, err := plotter.NewLinePoints(riverPoints(rounds, s.get, m.value))
			if err != nil {
				return "", fmt.Errorf("river plot: %s: %w", m.title, err)
			}
			l.Color, pts.Color, l.Width = s.color, s.color, vg.Points(1.5)
			pl.Add(l, pts)
			pl.Legend.Add(s.name, l, pts)
		}
		pl.Y.Max *= 1.3 // room for the legend
		panels = append(panels, pl)
	}
	path := filepath.Join(dir, "river.png")
	if err := savePanels(panels, path); err != nil {
		return "", err
	}
	return path, nil
}
