package console

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
)

// chart is one of the overview's charts of job activity.
type chart struct {
	ID, Title, Per string
	// Started, Succeeded and Failed are the window's totals: the jobs
	// created in it, and those that became succeeded or failed in it.
	Started, Succeeded, Failed int
	// SVG is the chart, drawn on the server.
	SVG template.HTML
}

// chartWindows are the overview's charts: the last hour per minute and
// the last day per hour.
var chartWindows = []struct {
	id, title, per string
	window, bucket time.Duration
}{
	{"chart-hour", "Last hour", "minute", time.Hour, time.Minute},
	{"chart-day", "Last day", "hour", 24 * time.Hour, time.Hour},
}

const (
	chartWidth  = 600
	chartHeight = 100
	chartGap    = 24
)

// newChart draws acts: the counts above, the p50 and p99 time to final
// below, each series a polyline scaled to its panel's largest value.
func newChart(id, title, per string, acts []job.Activity) chart {
	c := chart{ID: id, Title: title, Per: per}
	maxCount, maxDur := 1, time.Duration(0)
	for _, a := range acts {
		c.Started += a.Started
		c.Succeeded += a.Succeeded
		c.Failed += a.Failed
		maxCount = max(maxCount, a.Started)
		maxDur = max(maxDur, a.P99)
	}
	x := func(i int) float64 {
		if len(acts) < 2 {
			return 0
		}
		return float64(i) * chartWidth / float64(len(acts)-1)
	}
	line := func(class string, top int, value func(job.Activity) float64, top1 float64) string {
		var pts []string
		for i, a := range acts {
			y := float64(top+chartHeight) - value(a)/top1*chartHeight
			pts = append(pts, strconv.FormatFloat(x(i), 'f', 1, 64)+","+strconv.FormatFloat(y, 'f', 1, 64))
		}
		return `<polyline class="` + class + `" points="` + strings.Join(pts, " ") + `"/>`
	}
	count := func(f func(job.Activity) int) func(job.Activity) float64 {
		return func(a job.Activity) float64 { return float64(f(a)) }
	}
	durTop := max(maxDur.Seconds(), 0.001)
	second := chartHeight + chartGap
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="%s-svg" class="chart" viewBox="-2 -14 %d %d" role="img" aria-labelledby="%s-title" data-started="%d" data-succeeded="%d" data-failed="%d">`,
		id, chartWidth+4, 2*chartHeight+chartGap+18, id, c.Started, c.Succeeded, c.Failed)
	fmt.Fprintf(&b, `<title id="%s-title">%s per %s: %d jobs created, %d succeeded, %d failed; p99 time to final at most %s</title>`,
		id, title, per, c.Started, c.Succeeded, c.Failed, roundDuration(maxDur))
	fmt.Fprintf(&b, `<text class="axis" x="0" y="-3">jobs per %s (max %d)</text>`, per, maxCount)
	fmt.Fprintf(&b, `<line class="base" x1="0" y1="%d" x2="%d" y2="%d"/>`, chartHeight, chartWidth, chartHeight)
	b.WriteString(line("series-started", 0, count(func(a job.Activity) int { return a.Started }), float64(maxCount)))
	b.WriteString(line("series-succeeded", 0, count(func(a job.Activity) int { return a.Succeeded }), float64(maxCount)))
	b.WriteString(line("series-failed", 0, count(func(a job.Activity) int { return a.Failed }), float64(maxCount)))
	fmt.Fprintf(&b, `<text class="axis" x="0" y="%d">time to final, p50 and p99 (max %s)</text>`, second-3, roundDuration(maxDur))
	fmt.Fprintf(&b, `<line class="base" x1="0" y1="%d" x2="%d" y2="%d"/>`, second+chartHeight, chartWidth, second+chartHeight)
	b.WriteString(line("series-p50", second, func(a job.Activity) float64 { return a.P50.Seconds() }, durTop))
	b.WriteString(line("series-p99", second, func(a job.Activity) float64 { return a.P99.Seconds() }, durTop))
	b.WriteString(`</svg>`)
	c.SVG = template.HTML(b.String()) // only numbers and the fixed texts above
	return c
}

func roundDuration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
