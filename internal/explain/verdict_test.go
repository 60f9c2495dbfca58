package explain

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/workers/execution"
)

func ptr[T any](v T) *T { return &v }

// TestVerdict: the verdict names what happened, and the stories that
// break a promise are violations.
func TestVerdict(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	succeeded := &openapi.StoryExecution{Status: "succeeded", ResultRef: "ch_1"}
	tests := []struct {
		name         string
		story        Story
		effectsKnown bool
		want         string
		violation    bool
		uncertain    bool
	}{
		{
			name: "succeeded once",
			story: Story{Job: &openapi.StoryJob{Status: "succeeded"}, Execution: succeeded,
				Attempts: []openapi.StoryAttempt{{Attempt: 1, FencingToken: ptr(int64(5)), Outcome: "crashed"}, {Attempt: 2, FencingToken: ptr(int64(7)), Outcome: "succeeded"}},
				Effects:  []openapi.StoryEffect{{Kind: "payment", Ref: "ch_1"}}},
			effectsKnown: true,
			want:         "succeeded once at attempt 2 with token 7",
		},
		{
			name: "two effects",
			story: Story{Job: &openapi.StoryJob{Status: "succeeded"}, Execution: succeeded,
				Effects: []openapi.StoryEffect{{Kind: "invoice", Ref: "inv_1"}, {Kind: "invoice", Ref: "inv_2"}}},
			effectsKnown: true,
			want:         "two effects for one business key: invoice inv_1, invoice inv_2", violation: true,
		},
		{
			name:         "effect missing",
			story:        Story{Job: &openapi.StoryJob{Status: "succeeded"}, Execution: succeeded},
			effectsKnown: true,
			want:         "succeeded (result ch_1) but its effect is missing", violation: true,
		},
		{
			name:  "stuck",
			story: Story{Job: &openapi.StoryJob{Status: "queued", Queue: "default", TaskState: ptr("missing"), UpdatedAt: now.Add(-14*time.Minute - 20*time.Second)}},
			want:  "stuck: queued for 14m, no task in the queue", violation: true,
		},
		{
			name: "scheduled days ahead is not stuck",
			story: Story{Job: &openapi.StoryJob{Status: "scheduled", Queue: "default", TaskState: ptr("scheduled"),
				UpdatedAt: now.Add(-48 * time.Hour), NotBefore: ptr(now.Add(26 * time.Hour))}},
			want: "scheduled: not before 2026-12-04T10:00:00Z (in 26h0m), its task scheduled in queue default",
		},
		{
			name: "due a minute ago, waited two days",
			story: Story{Job: &openapi.StoryJob{Status: "queued", Queue: "default", TaskState: ptr("pending"),
				UpdatedAt: now.Add(-48 * time.Hour), NotBefore: ptr(now.Add(-time.Minute))}},
			want: "in progress: queued, 0 attempt(s) so far, its task pending in queue default",
		},
		{
			name: "due long ago and never run",
			story: Story{Job: &openapi.StoryJob{Status: "queued", Queue: "default", TaskState: ptr("missing"),
				UpdatedAt: now.Add(-48 * time.Hour), NotBefore: ptr(now.Add(-14*time.Minute - 20*time.Second))}},
			want: "stuck: queued for 14m, no task in the queue", violation: true,
		},
		{
			name:  "in progress",
			story: Story{Job: &openapi.StoryJob{Status: "retrying", Attempts: 2, Queue: "default", TaskState: ptr("retry"), UpdatedAt: now.Add(-time.Minute)}},
			want:  "in progress: retrying, 2 attempt(s) so far, its task retry in queue default",
		},
		{
			name:         "failed",
			story:        Story{Job: &openapi.StoryJob{Status: "failed", Attempts: 1, Error: ptr("permanent: declined")}},
			effectsKnown: true,
			want:         "failed after 1 attempt(s): permanent: declined",
		},
		{
			name: "cancelled before any attempt",
			story: Story{Job: &openapi.StoryJob{Status: "cancelled", CancelRequestedAt: &now},
				Attempts: []openapi.StoryAttempt{{Outcome: "cancelled", Error: execution.CancelledBefore}}},
			effectsKnown: true,
			want:         "cancelled before any attempt: nothing ran",
		},
		{
			name: "cancelled in flight, fenced out",
			story: Story{Job: &openapi.StoryJob{Status: "cancelled", Attempts: 1, CancelRequestedAt: &now},
				Attempts: []openapi.StoryAttempt{{Attempt: 1, FencingToken: ptr(int64(4)), Outcome: "cancelled", Error: execution.CancelledFenced + ": fence: stale fencing token 4"}}},
			effectsKnown: true,
			want:         "cancelled in flight at attempt 1 with token 4: its effect was fenced out by the cancel",
		},
		{
			name: "cancelled with the HTTP answer unknown",
			story: Story{Job: &openapi.StoryJob{Status: "cancelled", Task: "shipment.book", Attempts: 2, CancelRequestedAt: &now},
				Attempts: []openapi.StoryAttempt{{Attempt: 1, FencingToken: ptr(int64(3)), Outcome: "transient"},
					{Attempt: 2, FencingToken: ptr(int64(5)), Outcome: "cancelled", Error: execution.CancelledNoAnswer + ": deliver: no answer within 30s"}}},
			want: "cancelled after 2 attempt(s): the receiver may have applied it at attempt 2 (token 5)", uncertain: true,
		},
		{
			name: "cancel arrived, the attempt succeeded",
			story: Story{Job: &openapi.StoryJob{Status: "succeeded", CancelRequestedAt: &now}, Execution: succeeded,
				Attempts: []openapi.StoryAttempt{{Attempt: 1, FencingToken: ptr(int64(9)), Outcome: "succeeded"}},
				Effects:  []openapi.StoryEffect{{Kind: "payment", Ref: "ch_1"}}},
			effectsKnown: true,
			want:         "succeeded once at attempt 1 with token 9: a cancel arrived while it ran, and the attempt succeeded",
		},
		{
			name: "cancelled with an effect",
			story: Story{Job: &openapi.StoryJob{Status: "cancelled", Attempts: 1},
				Effects: []openapi.StoryEffect{{Kind: "payment", Ref: "ch_1"}}},
			effectsKnown: true,
			want:         "cancelled, but payment ch_1 carries its business key", violation: true,
		},
		{
			name: "refused: another payload did the business key",
			story: Story{Job: &openapi.StoryJob{Id: "job_b", Status: "failed", BusinessKey: "payment:p-1",
				Error: ptr("conflict: business key payment:p-1 already succeeded with a different payload (result ch_1)")},
				Execution: succeeded,
				Attempts:  []openapi.StoryAttempt{{JobId: "job_a", Attempt: 1, FencingToken: ptr(int64(4)), Outcome: "succeeded"}},
				Effects:   []openapi.StoryEffect{{Kind: "payment", Ref: "ch_1", JobId: ptr("job_a"), Sibling: ptr(true)}}},
			effectsKnown: true,
			want:         "refused: business key payment:p-1 already done by job job_a (result ch_1); this job ran nothing",
		},
		{
			name: "refused while another payload runs",
			story: Story{Job: &openapi.StoryJob{Id: "job_b", Status: "failed", BusinessKey: "payment:p-1"},
				Execution: &openapi.StoryExecution{Status: "processing"},
				Attempts:  []openapi.StoryAttempt{{JobId: "job_a", Attempt: 1, FencingToken: ptr(int64(4))}}},
			effectsKnown: true,
			want:         "refused: business key payment:p-1 was being processed by job job_a with another payload; this job ran nothing",
		},
		{
			name: "a duplicate acked with its sibling's result",
			story: Story{Job: &openapi.StoryJob{Id: "job_b", Status: "succeeded", BusinessKey: "payment:p-1"}, Execution: succeeded,
				Attempts: []openapi.StoryAttempt{{JobId: "job_a", Attempt: 1, FencingToken: ptr(int64(4)), Outcome: "succeeded"}},
				Effects:  []openapi.StoryEffect{{Kind: "payment", Ref: "ch_1", JobId: ptr("job_a"), Sibling: ptr(true)}}},
			effectsKnown: true,
			want:         "succeeded without an attempt of its own: business key payment:p-1 was already done by job job_a (result ch_1)",
		},
		{
			name: "a failed job beside its sibling's effect",
			story: Story{Job: &openapi.StoryJob{Id: "job_b", Status: "failed", Error: ptr("permanent: declined")}, Execution: succeeded,
				Attempts: []openapi.StoryAttempt{{Attempt: 1, FencingToken: ptr(int64(3)), Outcome: "permanent"},
					{JobId: "job_a", Attempt: 1, FencingToken: ptr(int64(4)), Outcome: "succeeded"}},
				Effects: []openapi.StoryEffect{{Kind: "payment", Ref: "ch_1", JobId: ptr("job_a"), Sibling: ptr(true)}}},
			effectsKnown: true,
			want:         "failed after 1 attempt(s): permanent: declined",
		},
		{
			name: "a delivery cancelled between tries that timed out",
			story: Story{Job: &openapi.StoryJob{Status: "cancelled", Task: "shipment.book", Attempts: 1, CancelRequestedAt: &now},
				Attempts: []openapi.StoryAttempt{
					{Attempt: 1, FencingToken: ptr(int64(3)), Outcome: "unavailable", Error: execution.NoAnswer + ": deliver to http://r/: no answer within 2s: context deadline exceeded"},
					{Attempt: 1, FencingToken: ptr(int64(5)), Outcome: "unavailable", Error: "deliver to http://r/: no answer within 2s: context deadline exceeded"},
					{Outcome: "cancelled", Error: execution.CancelledBefore}}},
			want:      "cancelled after 2 tries (0 counted): the receiver may have applied it at attempt 1 (token 3) or attempt 1 (token 5)",
			uncertain: true,
		},
		{
			name: "a delivery cancelled between tries the receiver refused",
			story: Story{Job: &openapi.StoryJob{Status: "cancelled", Task: "shipment.book", Attempts: 1, CancelRequestedAt: &now},
				Attempts: []openapi.StoryAttempt{
					{Attempt: 1, FencingToken: ptr(int64(3)), Outcome: "unavailable", Error: "deliver to http://r/: 503 Service Unavailable"},
					{Outcome: "cancelled", Error: execution.CancelledBefore}}},
			want: "cancelled between attempts after 1 try (0 counted): no attempt ran after the cancel",
		},
		{
			name: "a delivery retrying after a dropped answer",
			story: Story{Job: &openapi.StoryJob{Status: "retrying", Task: "shipment.book", Queue: "default", TaskState: ptr("retry"), UpdatedAt: now},
				Attempts: []openapi.StoryAttempt{{Attempt: 1, FencingToken: ptr(int64(3)), Outcome: "unavailable",
					Error: execution.NoAnswer + ": deliver to http://r/: EOF"}}},
			want:      "in progress: retrying, 0 attempt(s) so far, its task retry in queue default; the receiver may have applied it at attempt 1 (token 3)",
			uncertain: true,
		},
		{
			name: "key taken over",
			story: Story{Record: &openapi.StoryRecord{State: "completed", FencingToken: 2, Status: ptr(201)},
				Claims: []openapi.StoryClaim{{FencingToken: 1, Outcome: "taken_over"}, {FencingToken: 2, Outcome: "completed"}}},
			want: "completed once with token 2, status 201, after 2 claims",
		},
		{
			name: "key completed twice",
			story: Story{Record: &openapi.StoryRecord{State: "completed", FencingToken: 2},
				Claims: []openapi.StoryClaim{{FencingToken: 1, Outcome: "completed"}, {FencingToken: 2, Outcome: "completed"}}},
			want: "completed 2 times (tokens 1, 2)", violation: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x := &Explainer{StuckAfter: 10 * time.Minute, Now: func() time.Time { return now }, Delivered: delivered}
			s := tt.story
			s.Attempts = relabel(s.Attempts)
			x.judge(&s, tt.effectsKnown)
			if s.Verdict != tt.want || s.Violation != tt.violation || s.Uncertain != tt.uncertain {
				t.Errorf("verdict %q (violation %v, uncertain %v), want %q (%v, %v)", s.Verdict, s.Violation, s.Uncertain, tt.want, tt.violation, tt.uncertain)
			}
			var buf bytes.Buffer
			if err := WriteText(&buf, &s); err != nil || !strings.Contains(buf.String(), tt.want) {
				t.Errorf("text %q lacks the verdict (%v)", buf.String(), err)
			}
		})
	}
}

// delivered is the tests' Explainer.Delivered: shipment.book goes over
// HTTP.
func delivered(task string) bool { return task == "shipment.book" }

// relabel numbers hand-written ledger rows as addJob does: rows without a
// job id are the job's own (job ""), rows naming a job are a sibling's.
func relabel(as []openapi.StoryAttempt) []openapi.StoryAttempt {
	es := make([]execution.Entry, len(as))
	for i, a := range as {
		es[i] = execution.Entry{JobID: a.JobId, Attempt: a.Attempt, FencingToken: value64(a.FencingToken),
			Outcome: execution.Outcome(a.Outcome), Error: a.Error, StartedAt: a.StartedAt}
		if a.EndedAt != nil {
			es[i].EndedAt = *a.EndedAt
		}
	}
	return ledgerRows("", es)
}

func value64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
