package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit"
)

func TestParseConcurrencies(t *testing.T) {
	got, err := parseConcurrencies("10, 50,200")
	if err != nil || !slices.Equal(got, []int{10, 50, 200}) {
		t.Errorf(`parseConcurrencies("10, 50,200") = %v, %v; want [10 50 200]`, got, err)
	}
	for _, bad := range []string{"", "0", "ten", "10,2000", "10,-1"} {
		if got, err := parseConcurrencies(bad); err == nil {
			t.Errorf("parseConcurrencies(%q) = %v, want an error", bad, got)
		}
	}
}

// TestRiverTableRow checks what a reader takes from the river table: the
// ratio is idemgate's jobs/s over River's, CPU is per job in µs, and the
// PostgreSQL counters and the servers' CPU are divided by the jobs.
func TestRiverTableRow(t *testing.T) {
	idem := workerResult{Jobs: 1000, JobsPerSec: 500, CPUSeconds: 0.7, PGCPUSeconds: 1.8, RedisCPUSeconds: 0.25, DB: &dbCounters{Commits: 5300, WALSyncs: 1290}, P50Ms: 1.5, P99Ms: 12.25}
	river := workerResult{Jobs: 1000, JobsPerSec: 1000, CPUSeconds: 0.32, PGCPUSeconds: 0.9, DB: &dbCounters{Commits: 1300, WALSyncs: 250}, P50Ms: 0.8, P99Ms: 4}
	out := riverTable([]riverRound{{Concurrency: 50, Round: 2, Idemgate: idem, River: river}})
	for _, col := range []string{"| handler p50 / p99 ms (idemgate / River) |", "| PostgreSQL CPU µs/job (idemgate / River) | Redis CPU µs/job (idemgate / River) |"} {
		if !strings.Contains(out, col) {
			t.Errorf("river table lacks the column %q:\n%s", col, out)
		}
	}
	// River's side uses no Redis: a measured 0, not "–".
	want := "| 50 | 2 | 500 | 1000 | 0.50× | 700 / 320 | 1800 / 900 | 250 / 0 | 5.30 / 1.30 | 1.29 / 0.25 | 1.50 / 12.25 · 0.80 / 4.00 |"
	if !strings.Contains(out, want) {
		t.Errorf("river table lacks the row %q:\n%s", want, out)
	}
	// A side without counters or jobs reads as zeros, not NaN.
	out = riverTable([]riverRound{{Concurrency: 1, Round: 1}})
	// Without -private the servers' CPU is not measured: "–".
	if strings.Contains(out, "NaN") || !strings.Contains(out, "| 1 | 1 | 0 | 0 | – | 0 / 0 | – / – | – / – |") {
		t.Errorf("an empty round reads:\n%s", out)
	}
}

// TestRiverAndEffectSidesDoEveryJob runs both sides of the river scenario
// on a few jobs, each prepared, run and checked in turn as the harness
// does: every job must be done once, its effect row written, and on
// idemgate's side its job document must say succeeded.
func TestRiverAndEffectSidesDoEveryJob(t *testing.T) {
	t.Parallel()
	db := testkit.Database(t)
	redisURL := testkit.RedisURL(t)
	const jobs = 40
	for _, mode := range []string{"river", "effect"} {
		queue := fmt.Sprintf("idembench_test_%s_%d", mode, time.Now().UnixNano())
		var res workerResult
		for _, phase := range []string{"prepare", "run", "check"} {
			var out bytes.Buffer
			err := runWorkerChild(t.Context(), []string{"-mode", mode, "-phase", phase, "-jobs", fmt.Sprint(jobs),
				"-concurrency", "4", "-queue", queue, "-database-url", db, "-redis-url", redisURL, "-timeout", "1m"}, &out)
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", mode, phase, err, out.String())
			}
			if phase == "run" {
				if err := json.Unmarshal(lastLine(out.Bytes()), &res); err != nil {
					t.Fatalf("%s run: result %q: %v", mode, out.String(), err)
				}
			}
		}
		if res.Jobs != jobs || res.JobsPerSec <= 0 || res.CPUSeconds <= 0 {
			t.Errorf("%s: result %+v, want %d jobs with a rate and CPU time", mode, res, jobs)
		}
		if res.P50Ms <= 0 || res.P99Ms < res.P50Ms {
			t.Errorf("%s: handler p50 %v ms, p99 %v ms; want 0 < p50 <= p99", mode, res.P50Ms, res.P99Ms)
		}
	}
}
