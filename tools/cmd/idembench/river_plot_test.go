package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func fakeRiverRound(conc, round int, idemRate, riverRate float64) riverRound {
	return riverRound{
		Concurrency: conc, Round: round,
		Idemgate: workerResult{Jobs: 1000, JobsPerSec: idemRate, P50Ms: 2, P99Ms: 9, DB: &dbCounters{WALSyncs: 1200}},
		River:    workerResult{Jobs: 1000, JobsPerSec: riverRate, P50Ms: 1, P99Ms: 4, DB: &dbCounters{WALSyncs: 300}},
	}
}

// TestRiverPlotWritesAPNG checks that two rounds at two concurrencies
// give river.png, a PNG that decodes, in the run's directory.
func TestRiverPlotWritesAPNG(t *testing.T) {
	dir := t.TempDir()
	path, err := riverPlot([]riverRound{fakeRiverRound(1, 1, 300, 400), fakeRiverRound(10, 1, 900, 1500)}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "river.png") {
		t.Errorf("plot written to %q, want river.png in %s", path, dir)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("river.png does not decode: %v", err)
	}
	if r := img.Bounds(); r.Dx() < 100 || r.Dy() < 100 {
		t.Errorf("river.png is %v, want a drawn image", r)
	}
}

// TestRiverPlotNeedsTwoConcurrencies: rounds at one concurrency have no
// line to draw, so no file is written.
func TestRiverPlotNeedsTwoConcurrencies(t *testing.T) {
	dir := t.TempDir()
	path, err := riverPlot([]riverRound{fakeRiverRound(10, 1, 900, 1500), fakeRiverRound(10, 2, 950, 1400)}, dir)
	if err != nil || path != "" {
		t.Errorf("riverPlot at one concurrency = %q, %v; want no plot", path, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "river.png")); !os.IsNotExist(err) {
		t.Errorf("river.png written for one concurrency (stat: %v)", err)
	}
}

// TestRiverPointsTakeTheMedianRound checks that each concurrency's point
// is the median of its rounds, in ascending concurrency.
func TestRiverPointsTakeTheMedianRound(t *testing.T) {
	rounds := []riverRound{
		fakeRiverRound(50, 1, 100, 0), fakeRiverRound(10, 1, 700, 0),
		fakeRiverRound(50, 2, 900, 0), fakeRiverRound(50, 3, 500, 0),
	}
	rate := func(r workerResult) float64 { return r.JobsPerSec }
	got := riverPoints(rounds, func(r riverRound) workerResult { return r.Idemgate }, rate)
	var xs, ys []float64
	for _, p := range got {
		xs, ys = append(xs, p.X), append(ys, p.Y)
	}
	if !slices.Equal(xs, []float64{10, 50}) || !slices.Equal(ys, []float64{700, 500}) {
		t.Errorf("points x %v y %v; want x [10 50], y [700 500]", xs, ys)
	}
}
