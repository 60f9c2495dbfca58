package shipments_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/examples/shipments"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/receiver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "whsec_c2hpcG1lbnRzIGRlbW8gc2VjcmV0IGZvciB0ZXN0cw=="

// delivery is a signed POST as idemgate sends it.
func delivery(t *testing.T, tenant, orderID string, token int64, data string) *http.Request {
	t.Helper()
	key := "shipment:" + orderID
	jobID := "job_" + tenant + "_" + orderID
	env, err := json.Marshal(map[string]any{
		"type": "shipment.book", "timestamp": time.Now().UTC(), "job_id": jobID,
		"tenant": tenant, "business_key": key, "attempt": 1,
		"fencing_token": strconv.FormatInt(token, 10), "data": json.RawMessage(data),
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now().Unix()
	r := httptest.NewRequest(http.MethodPost, "/hooks/shipments", bytes.NewReader(env))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("webhook-id", jobID)
	r.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	r.Header.Set("webhook-signature", testkit.WebhookSignature(t, secret, jobID, ts, env))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Idempotency-Fencing-Token", strconv.FormatInt(token, 10))
	r.Header.Set("Idemgate-Tenant", tenant)
	return r
}

func newHandler(t *testing.T) (http.Handler, *pgxpool.Pool) {
	t.Helper()
	pool := testkit.Pool(t)
	if err := shipments.EnsureSchema(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	v, err := receiver.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	return shipments.New(v, pool), pool
}

type answer struct {
	Status    int
	Stale     string
	ResultRef string `json:"result_ref"`
	Error     string `json:"error"`
}

func post(t *testing.T, h http.Handler, r *http.Request) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	var a answer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("answer %d: %q is not JSON", rec.Code, rec.Body)
	}
	a.Status, a.Stale = rec.Code, rec.Header().Get("Idemgate-Stale")
	return a
}

type shipment struct {
	ID       int64
	Quantity int64
	Token    int64
}

func shipmentsOf(t *testing.T, pool *pgxpool.Pool, tenant, orderID string) []shipment {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT id, quantity, fencing_token FROM shipments WHERE tenant = $1 AND order_id = $2`, tenant, orderID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []shipment
	for rows.Next() {
		var s shipment
		if err := rows.Scan(&s.ID, &s.Quantity, &s.Token); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestBookOncePerOrder(t *testing.T) {
	t.Parallel()
	h, pool := newHandler(t)

	first := post(t, h, delivery(t, "acme", "o-1", 3, `{"order_id":"o-1","quantity":2}`))
	if first.Status != http.StatusOK || !strings.HasPrefix(first.ResultRef, "shp_") {
		t.Fatalf("first delivery: %+v, want 200 with shp_…", first)
	}
	got := shipmentsOf(t, pool, "acme", "o-1")
	if len(got) != 1 || got[0].Quantity != 2 || got[0].Token != 3 || "shp_"+strconv.FormatInt(got[0].ID, 10) != first.ResultRef {
		t.Fatalf("shipments = %+v, want one of quantity 2, token 3, named %s", got, first.ResultRef)
	}

	again := post(t, h, delivery(t, "acme", "o-1", 4, `{"order_id":"o-1","quantity":2}`))
	if again.Status != http.StatusOK || again.ResultRef != first.ResultRef {
		t.Fatalf("repeat: %+v, want 200 with %s", again, first.ResultRef)
	}
	if n := len(shipmentsOf(t, pool, "acme", "o-1")); n != 1 {
		t.Fatalf("%d shipments after a repeat, want 1", n)
	}

	other := post(t, h, delivery(t, "globex", "o-1", 1, `{"order_id":"o-1","quantity":5}`))
	if other.Status != http.StatusOK || other.ResultRef == first.ResultRef {
		t.Fatalf("another tenant's order o-1: %+v, want a shipment of its own", other)
	}
	if got := shipmentsOf(t, pool, "globex", "o-1"); len(got) != 1 || got[0].Quantity != 5 {
		t.Fatalf("globex shipments = %+v, want one of quantity 5", got)
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	h, pool := newHandler(t)
	if a := post(t, h, delivery(t, "acme", "o-7", 5, `{"order_id":"o-7","quantity":1}`)); a.Status != http.StatusOK {
		t.Fatalf("booking o-7: %+v", a)
	}

	for _, tc := range []struct {
		name    string
		req     *http.Request
		status  int
		stale   string
		message string
	}{
		{"stale token", delivery(t, "acme", "o-7", 4, `{"order_id":"o-7","quantity":9}`), http.StatusConflict, "true", "stale fencing token 4"},
		{"no quantity", delivery(t, "acme", "o-8", 1, `{"order_id":"o-8"}`), http.StatusUnprocessableEntity, "", "quantity 0 is not positive"},
		{"quantity not an integer", delivery(t, "acme", "o-8", 1, `{"order_id":"o-8","quantity":1.5}`), http.StatusUnprocessableEntity, "", "shipment payload"},
		{"no order", delivery(t, "acme", "o-8", 1, `{"quantity":1}`), http.StatusUnprocessableEntity, "", "order_id is required"},
		{"unsigned", func() *http.Request {
			r := delivery(t, "acme", "o-8", 1, `{"order_id":"o-8","quantity":1}`)
			r.Header.Del("webhook-signature")
			return r
		}(), http.StatusUnauthorized, "", "missing webhook headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := post(t, h, tc.req)
			if a.Status != tc.status || a.Stale != tc.stale || !strings.Contains(a.Error, tc.message) {
				t.Fatalf("answer %+v, want %d (stale %q) saying %q", a, tc.status, tc.stale, tc.message)
			}
		})
	}
	if got := shipmentsOf(t, pool, "acme", "o-7"); len(got) != 1 || got[0].Quantity != 1 {
		t.Fatalf("o-7 = %+v, want the first booking untouched", got)
	}
	if n := len(shipmentsOf(t, pool, "acme", "o-8")); n != 0 {
		t.Fatalf("%d shipments for refused deliveries", n)
	}
}
