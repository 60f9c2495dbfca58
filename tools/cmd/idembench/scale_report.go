package main

import (
	"context"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

type scaleReport struct {
	runInfo
	Points   []scalePoint `json:"points"`
	Jobs     *jobsGrowth  `json:"jobs,omitempty"`
	Plots    []string     `json:"plots,omitempty"`
	Problems []string     `json:"problems,omitempty"`
}

// scalePoint is one store at one size.
type scalePoint struct {
	Store       string                  `json:"store"`
	Records     int64                   `json:"records"`
	Expired     int64                   `json:"expired"`
	FillSeconds float64                 `json:"fill_seconds"`
	PG          *pgSize                 `json:"postgres_size,omitempty"`
	Redis       *redisSize              `json:"redis_size,omitempty"`
	Scenarios   map[string][]pairRecord `json:"scenarios"`
	Janitor     *janitorRecord          `json:"janitor,omitempty"`
}

type pgSize struct {
	RecordsHeap    float64 `json:"records_heap_bytes"`
	RecordsIndexes float64 `json:"records_index_bytes"`
	RecordsTotal   float64 `json:"records_total_bytes"`
	ClaimsTotal    float64 `json:"claims_total_bytes"`
	ClaimsIndexes  float64 `json:"claims_index_bytes"`
	PerRecord      float64 `json:"bytes_per_record"` // both tables, with indexes and TOAST
}

type redisSize struct {
	UsedDelta   int64   `json:"used_memory_delta"`
	PerRecord   float64 `json:"bytes_per_record"`
	SampleBytes int64   `json:"memory_usage_sample"`
	Encoding    string  `json:"encoding"`
}

type janitorRecord struct {
	Interval     string     `json:"interval"`
	Batch        int        `json:"batch"`
	Backlog      int64      `json:"backlog"`
	Deleted      int64      `json:"deleted"`
	Seconds      float64    `json:"seconds"`
	DrainedAfter float64    `json:"drained_after_seconds,omitempty"`
	Base         loadResult `json:"baseline"`
	Without      loadResult `json:"claims_without_janitor"`
	With         loadResult `json:"claims_with_janitor"`
}

// Rate is the janitor's deletions per second while it had a backlog.
func (j *janitorRecord) Rate() float64 {
	if j.DrainedAfter > 0 {
		return float64(j.Deleted) / j.DrainedAfter
	}
	return float64(j.Deleted) / j.Seconds
}

// P99Factor is the claims' p99 with the janitor over their p99 without.
func (j *janitorRecord) P99Factor() float64 {
	if j == nil || j.Without.P99 == 0 {
		return 0
	}
	return float64(j.With.P99) / float64(j.Without.P99)
}

// pgSizes vacuums and analyses both tables, then reads their sizes.
func pgSizes(ctx context.Context, pool *pgxpool.Pool, records int64) (pgSize, error) {
	var s pgSize
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE idempotency_records"); err != nil {
		return s, err
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE idempotency_claims"); err != nil {
		return s, err
	}
	err := pool.QueryRow(ctx, `SELECT pg_relation_size('idempotency_records'), pg_indexes_size('idempotency_records'),
		pg_total_relation_size('idempotency_records'), pg_total_relation_size('idempotency_claims'), pg_indexes_size('idempotency_claims')`).
		Scan(&s.RecordsHeap, &s.RecordsIndexes, &s.RecordsTotal, &s.ClaimsTotal, &s.ClaimsIndexes)
	s.PerRecord = (s.RecordsTotal + s.ClaimsTotal) / float64(records)
	return s, err
}

// redisSizes reads MEMORY USAGE and the encoding of one filled record.
func redisSizes(ctx context.Context, rdb *redis.Client, key string) redisSize {
	var s redisSize
	s.SampleBytes, _ = rdb.MemoryUsage(ctx, key, 0).Result()
	s.Encoding, _ = rdb.ObjectEncoding(ctx, key).Result()
	return s
}

// redisPerRecord is the Redis memory per record of the largest fill so
// far, 0 before the first.
func (r *scaleReport) redisPerRecord() float64 {
	var per float64
	for _, p := range r.Points {
		if p.Redis != nil && p.Redis.PerRecord > 0 {
			per = p.Redis.PerRecord
		}
	}
	return per
}

// medianPair is the pair of median ratio, the one the tables show.
func medianPair(pairs []pairRecord) (pairRecord, bool) {
	if len(pairs) == 0 {
		return pairRecord{}, false
	}
	s := slices.Clone(pairs)
	sort.Slice(s, func(i, j int) bool { return s[i].Ratio() < s[j].Ratio() })
	return s[len(s)/2], true
}

var scaleScenarios = []struct{ name, label string }{
	{"unique", "claim (new key)"},
	{"replay", "replay (filled key)"},
	{"inflight", "409 (key in flight)"},
}

func (r *scaleReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# idembench scale\n\n`%s` on %s, %s, %.0f s.\n\n", r.Command, r.Machine.String(), r.Started.Format(time.RFC3339), r.Seconds)
	if len(r.Points) > 0 {
		b.WriteString("| store | records | scenario | baseline req/s | idemgate req/s | ratio | baseline p99 | idemgate p99 | 409 p99 |\n|---|---:|---|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range r.Points {
			for _, sc := range scaleScenarios {
				m, ok := medianPair(p.Scenarios[sc.name])
				if !ok {
					continue
				}
				c409 := "-"
				if sc.name == "inflight" {
					c409 = fmtDur(m.Cand.ByCode[409].P99)
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f | **%.2f×** | %s | %s | %s |\n",
					p.Store, fmtCount(p.Records), sc.label, m.Base.RPS, m.Cand.RPS, m.Ratio(), fmtDur(m.Base.P99), fmtDur(m.Cand.P99), c409)
			}
		}
		b.WriteString("\nSize per record:\n\n| store | records | fill | per record | detail |\n|---|---:|---:|---:|---|\n")
		for _, p := range r.Points {
			switch {
			case p.PG != nil:
				n := float64(p.Records)
				fmt.Fprintf(&b, "| postgres | %s | %.0f s | %.0f B | idempotency_records: table %.0f B + indexes %.0f B (total with TOAST %.0f B); idempotency_claims %.0f B (indexes %.0f B) |\n",
					fmtCount(p.Records), p.FillSeconds, p.PG.PerRecord, p.PG.RecordsHeap/n, p.PG.RecordsIndexes/n, p.PG.RecordsTotal/n, p.PG.ClaimsTotal/n, p.PG.ClaimsIndexes/n)
			case p.Redis != nil:
				fmt.Fprintf(&b, "| redis | %s | %.0f s | %.0f B | used_memory +%.1f MiB; MEMORY USAGE of one record %d B, encoding %s |\n",
					fmtCount(p.Records), p.FillSeconds, p.Redis.PerRecord, float64(p.Redis.UsedDelta)/(1<<20), p.Redis.SampleBytes, p.Redis.Encoding)
			}
		}
	}
	var jan bool
	for _, p := range r.Points {
		if p.Janitor == nil {
			continue
		}
		if !jan {
			b.WriteString("\nClaims while the janitor deletes the expired backlog (PostgreSQL):\n\n| records | expired | baseline req/s | claims req/s without / with janitor | claims p99 without / with | p99 factor | deleted | rows/s | backlog cleared |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
			jan = true
		}
		j := p.Janitor
		cleared := "no"
		if j.DrainedAfter > 0 {
			cleared = fmt.Sprintf("after %.1f s", j.DrainedAfter)
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f / %.0f | %s / %s | **%.2f×** | %d | %.0f | %s |\n",
			fmtCount(p.Records), fmtCount(j.Backlog), j.Base.RPS, j.Without.RPS, j.With.RPS, fmtDur(j.Without.P99), fmtDur(j.With.P99),
			j.P99Factor(), j.Deleted, j.Rate(), cleared)
	}
	if r.Jobs != nil {
		b.WriteString(r.Jobs.markdown())
	}
	if len(r.Plots) > 0 {
		b.WriteString("\nPlots: " + strings.Join(r.Plots, ", ") + "\n")
	}
	if len(r.Problems) > 0 {
		b.WriteString("\nProblems:\n\n")
		for _, p := range r.Problems {
			b.WriteString("- " + p + "\n")
		}
	}
	return b.String()
}

func writeScaleReport(rep *scaleReport, dir string, stdout io.Writer) error {
	plots, err := scalePlots(rep, dir)
	if err != nil {
		rep.Problems = append(rep.Problems, "plots: "+err.Error())
	}
	rep.Plots = plots
	if err := saveResults(stdout, dir, "results", rep.markdown(), rep); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "idembench scale: wrote %s, %s and %d plots\n", filepath.Join(dir, "results.md"), filepath.Join(dir, "results.json"), len(plots))
	return nil
}

// scalePlots draws, for each store, idemgate's throughput and p99 of each
// scenario against the number of stored records, with the baseline of the
// same runs dashed: growth-STORE.png, two panels side by side.
func scalePlots(rep *scaleReport, dir string) ([]string, error) {
	var files []string
	colors := []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 255}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}}
	for _, store := range []string{"postgres", "redis"} {
		var pts []scalePoint
		for _, p := range rep.Points {
			if p.Store == store {
				pts = append(pts, p)
			}
		}
		if len(pts) == 0 {
			continue
		}
		panels := [2]*plot.Plot{plot.New(), plot.New()}
		for i, metric := range []string{"throughput (req/s)", "p99 latency (ms)"} {
			pl := panels[i]
			pl.Title.Text = fmt.Sprintf("%s: %s", store, metric)
			pl.X.Label.Text = "records in the store"
			pl.Y.Label.Text = metric
			pl.Y.Min = 0
			pl.Legend.Top = true
			var ticks []plot.Tick
			for _, p := range pts {
				ticks = append(ticks, plot.Tick{Value: float64(p.Records), Label: fmtCount(p.Records)})
			}
			pl.X.Tick.Marker = plot.ConstantTicks(ticks)
			if pts[0].Records > 0 && len(pts) > 1 {
				pl.X.Scale = plot.LogScale{}
			}
			for si, sc := range scaleScenarios {
				var cand, base plotter.XYs
				for _, p := range pts {
					m, ok := medianPair(p.Scenarios[sc.name])
					if !ok {
						continue
					}
					x := float64(p.Records)
					if i == 0 {
						cand = append(cand, plotter.XY{X: x, Y: m.Cand.RPS})
						base = append(base, plotter.XY{X: x, Y: m.Base.RPS})
					} else {
						cand = append(cand, plotter.XY{X: x, Y: float64(m.Cand.P99) / 1e6})
						base = append(base, plotter.XY{X: x, Y: float64(m.Base.P99) / 1e6})
					}
				}
				if len(cand) == 0 {
					continue
				}
				l, s, err := plotter.NewLinePoints(cand)
				if err != nil {
					return files, err
				}
				l.Color, s.Color, l.Width = colors[si], colors[si], vg.Points(1.5)
				pl.Add(l, s)
				pl.Legend.Add("idemgate "+sc.label, l, s)
				bl, err := plotter.NewLine(base)
				if err != nil {
					return files, err
				}
				bl.Color, bl.Dashes = colors[si], []vg.Length{vg.Points(4), vg.Points(3)}
				pl.Add(bl)
				pl.Legend.Add("baseline, same runs", bl)
			}
			pl.Y.Max *= 1.35 // room for the legend
		}
		path := filepath.Join(dir, "growth-"+store+".png")
		if err := savePanels(panels[:], path); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// savePanels draws panels side by side into one PNG at path.
func savePanels(panels []*plot.Plot, path string) error {
	const w, h = 14 * vg.Inch, 5 * vg.Inch
	img := vgimg.New(w, h)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{panels}, tiles, draw.New(img))
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
