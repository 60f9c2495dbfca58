package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "whsec_c2hpcG1lbnRzIGRlbW8gc2VjcmV0IGZvciB0ZXN0cw=="

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"nothing set", nil, nil, "no database: set --database-url or DATABASE_URL\nno webhook secret"},
		{"bad secret", []string{"--secret", "hunter2"}, map[string]string{"DATABASE_URL": "postgres://x"}, `does not start with "whsec_"`},
		{"unknown flag", []string{"--port", "1"}, nil, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := run(t.Context(), tc.args, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v, want a usage error saying %q", err, tc.want)
			}
		})
	}
}

// TestServe starts the receiver as `make run` does, books a shipment over
// HTTP twice, and stops it.
func TestServe(t *testing.T) {
	dbURL := testkit.Postgres(t)
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		env := map[string]string{"DATABASE_URL": dbURL, "SHIP_WEBHOOK_SECRET": secret}
		done <- run(ctx, []string{"--listen", "127.0.0.1:0"}, func(k string) string { return env[k] }, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("no listening line: %v (run: %v)", err, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "shipments-receiver listening on ")
	if !ok || !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("listening line %q", line)
	}

	var refs []string
	for range 2 {
		resp := postDelivery(t, base+"/hooks/shipments")
		var body struct {
			ResultRef string `json:"result_ref"`
		}
		err := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("POST /hooks/shipments: %d, %v", resp.StatusCode, err)
		}
		refs = append(refs, body.ResultRef)
	}
	if !strings.HasPrefix(refs[0], "shp_") || refs[0] != refs[1] {
		t.Fatalf("result_refs %q, want one shp_… twice", refs)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after shutdown: %v", err)
	}
}

func postDelivery(t *testing.T, url string) *http.Response {
	t.Helper()
	body := []byte(`{"type":"shipment.book","timestamp":"2026-12-03T08:00:00Z","job_id":"job_1","tenant":"acme",` +
		`"business_key":"shipment:o-1","attempt":1,"fencing_token":"1","data":{"order_id":"o-1","quantity":2}}`)
	ts := time.Now().Unix()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", "job_1")
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", testkit.WebhookSignature(t, secret, "job_1", ts, body))
	req.Header.Set("Idempotency-Key", "shipment:o-1")
	req.Header.Set("Idempotency-Fencing-Token", "1")
	req.Header.Set("Idemgate-Tenant", "acme")
	// No keep-alive: a connection left idle would outlive the test.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
