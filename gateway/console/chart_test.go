package console_test

import (
	"testing"

	"golang.org/x/net/html"
)

// TestOverviewCharts: the overview draws the jobs created in the last
// hour and the last day, and those that succeeded or failed in it, from
// PostgreSQL, as an inline SVG with a line per series.
func TestOverviewCharts(t *testing.T) {
	v := setup(t)
	ids := []string{
		v.invoice(t, "acme", "chart-1", "o-chart-1"),
		v.invoice(t, "acme", "chart-2", "o-chart-2"),
		v.invoice(t, "globex", "chart-3", "o-chart-3"),
	}
	if _, err := v.pool.Exec(t.Context(), `UPDATE jobs SET status = 'succeeded', created_at = now() - interval '2 seconds', finished_at = now() WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := v.pool.Exec(t.Context(), `UPDATE jobs SET status = 'failed', created_at = now() - interval '30 seconds', finished_at = now() WHERE id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	doc := v.page(t, "/admin/ui/")
	for _, id := range []string{"chart-hour", "chart-day"} {
		fig := byID(doc, id)
		if fig == nil {
			t.Fatalf("the overview has no %s", id)
		}
		for name, want := range map[string]string{"data-started": "3", "data-succeeded": "1", "data-failed": "1"} {
			if got, _ := attr(fig, name); got != want {
				t.Errorf("%s %s = %q, want %q", id, name, got, want)
			}
		}
		lines := find(fig, func(n *html.Node) bool { return n.Data == "polyline" })
		if len(lines) != 5 {
			t.Errorf("%s draws %d lines, want 5 (started, succeeded, failed, p50, p99)", id, len(lines))
		}
	}
	if got := text(byID(doc, "chart-hour-svg")); got == "" {
		t.Error("the chart has no title for a screen reader")
	}
}
