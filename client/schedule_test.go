package client

import (
	"testing"
	"time"
)

// The schedule options send the gateway's headers, the same on every
// attempt of the call.
func TestSubmitJobSchedule(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 5, 8, 0, 0, 0, time.FixedZone("", 3600))
	for _, tc := range []struct {
		name         string
		opt          CallOption
		header, want string
	}{
		{"a delay", WithDelay(2 * time.Hour), "Idemgate-Delay", "7200"},
		{"a delay rounded up", WithDelay(1500 * time.Millisecond), "Idemgate-Delay", "2"},
		{"no delay", WithDelay(-time.Second), "Idemgate-Delay", "0"},
		{"a time", WithNotBefore(at), "Idemgate-Not-Before", "2026-12-05T08:00:00+01:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, reply{status: 503}, jobReply(202, "scheduled", ""))
			j, err := testClient(g, newClock()).SubmitJob(t.Context(), "/v1/shipments", map[string]any{"order_id": "o-1"}, WithKey("k"), tc.opt)
			if err != nil || j.Status != "scheduled" {
				t.Fatalf("SubmitJob: %+v, %v", j, err)
			}
			reqs := g.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want the 503 retried once", len(reqs))
			}
			for i, r := range reqs {
				if got := r.header.Values(tc.header); len(got) != 1 || got[0] != tc.want {
					t.Errorf("attempt %d: %s = %q, want %q", i+1, tc.header, got, tc.want)
				}
			}
		})
	}
}
