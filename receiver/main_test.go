package receiver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// now is the fixed clock of the tests that sign.
var now = time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)

const (
	testSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	otherSecret = "whsec_c2Vjb25kIHNlY3JldCBmb3Igcm90YXRpb24="
)

// wire is a delivery as the sender writes it.
type wire struct {
	Type         string          `json:"type"`
	Timestamp    time.Time       `json:"timestamp"`
	JobID        string          `json:"job_id"`
	Tenant       string          `json:"tenant"`
	BusinessKey  string          `json:"business_key"`
	Attempt      int             `json:"attempt"`
	FencingToken string          `json:"fencing_token"`
	Data         json.RawMessage `json:"data"`
}

func newWire(tenant, key string, token int64) wire {
	return wire{
		Type: "shipment.book", Timestamp: now, JobID: "job_" + tenant + "_" + key,
		Tenant: tenant, BusinessKey: key, Attempt: 1,
		FencingToken: strconv.FormatInt(token, 10),
		Data:         json.RawMessage(`{"order_id":"o-1","quantity":2}`),
	}
}

// request is a signed delivery of w with the headers the sender sets.
func request(t testing.TB, secret string, w wire) *http.Request {
	t.Helper()
	body, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return signedRequest(t, secret, w, body)
}

func signedRequest(t testing.TB, secret string, w wire, body []byte) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/hooks/shipments", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("webhook-id", w.JobID)
	r.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	r.Header.Set("webhook-signature", testkit.WebhookSignature(t, secret, w.JobID, now.Unix(), body))
	r.Header.Set("Idempotency-Key", w.BusinessKey)
	r.Header.Set("Idempotency-Fencing-Token", w.FencingToken)
	r.Header.Set("Idemgate-Tenant", w.Tenant)
	r.Header.Set("Idemgate-Task", w.Type)
	r.Header.Set("Idemgate-Attempt", strconv.Itoa(w.Attempt))
	return r
}

func testVerifier(t testing.TB, secrets ...string) *Verifier {
	t.Helper()
	if len(secrets) == 0 {
		secrets = []string{testSecret}
	}
	v, err := NewVerifier(secrets...)
	if err != nil {
		t.Fatal(err)
	}
	v.Now = func() time.Time { return now }
	return v
}
