package receiver_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/receiver"
)

// Verifying a delivery signed the way idemgate signs it. The signature
// printed first is a test vector for an implementation in another language.
func ExampleVerifier() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	sentAt := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	id, ts := "job_01", strconv.FormatInt(sentAt.Unix(), 10)
	body := []byte(`{"type":"shipment.book","tenant":"acme","business_key":"shipment:o-1","fencing_token":"7"}`)

	// The sender: HMAC-SHA256 of "{id}.{timestamp}.{body}" keyed with the
	// base64-decoded secret.
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	sig := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	fmt.Println(sig)

	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", sig)

	// The receiver. The old and the new secret while one rotates; a fixed
	// clock here, time.Now by default.
	v, err := receiver.NewVerifier("whsec_c2Vjb25kIHNlY3JldCBmb3Igcm90YXRpb24=", secret)
	if err != nil {
		panic(err)
	}
	v.Now = func() time.Time { return sentAt.Add(time.Minute) }

	fmt.Println("as sent:", v.Verify(h, body))
	err = v.Verify(h, bytes.Replace(body, []byte("acme"), []byte("evil"), 1))
	fmt.Println("body changed:", errors.Is(err, receiver.ErrSignature))
	v.Now = func() time.Time { return sentAt.Add(time.Hour) }
	err = v.Verify(h, body)
	fmt.Println("an hour later:", errors.Is(err, receiver.ErrTimestamp))
	// Output:
	// v1,87HmqcDqusFtWlInw9rkiv/eeont00pqYgGUVvto8Ac=
	// as sent: <nil>
	// body changed: true
	// an hour later: true
}

// Booking a shipment once per order with Handler. It needs PostgreSQL, so it
// is compiled but not run.
func ExampleHandler() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if err := receiver.EnsureSchema(ctx, pool); err != nil {
		panic(err)
	}
	v, err := receiver.NewVerifier(os.Getenv("SHIP_WEBHOOK_SECRET"))
	if err != nil {
		panic(err)
	}

	type shipment struct {
		OrderID  string `json:"order_id"`
		Quantity int    `json:"quantity"`
	}
	orderID := func(d receiver.Delivery) string {
		var s shipment
		_ = json.Unmarshal(d.Data, &s)
		return s.OrderID
	}
	book := func(ctx context.Context, tx pgx.Tx, d receiver.Delivery) (string, error) {
		var s shipment
		if err := json.Unmarshal(d.Data, &s); err != nil || s.Quantity <= 0 {
			return "", receiver.Reject(fmt.Errorf("not a shipment: %s", d.Data)) // 422: never retried
		}
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO my_shipments (order_id, quantity) VALUES ($1, $2) RETURNING id`,
			s.OrderID, s.Quantity).Scan(&id)
		return fmt.Sprintf("shp_%d", id), err
	}

	mux := http.NewServeMux()
	mux.Handle("POST /hooks/shipments", receiver.Handler(v, pool,
		func(d receiver.Delivery) string { return "order:" + orderID(d) }, book))
	_ = http.ListenAndServe("127.0.0.1:9200", mux)
}

// Reading a delivery without Handler, to apply it some other way.
func ExampleRead() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	sentAt := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	body := `{"type":"shipment.book","timestamp":"2026-12-03T08:00:00Z","job_id":"job_01",` +
		`"tenant":"acme","business_key":"shipment:o-1","attempt":2,"fencing_token":"7",` +
		`"data":{"order_id":"o-1","quantity":2}}`
	r := httptest.NewRequest(http.MethodPost, "/hooks/shipments", strings.NewReader(body))
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "job_01.%d.%s", sentAt.Unix(), body)
	r.Header.Set("webhook-id", "job_01")
	r.Header.Set("webhook-timestamp", strconv.FormatInt(sentAt.Unix(), 10))
	r.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	r.Header.Set("Idempotency-Key", "shipment:o-1")
	r.Header.Set("Idempotency-Fencing-Token", "7")
	r.Header.Set("Idemgate-Tenant", "acme")

	v, _ := receiver.NewVerifier(secret)
	v.Now = func() time.Time { return sentAt }
	d, err := receiver.Read(r, v, 64<<10)
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Tenant, d.BusinessKey, d.FencingToken, d.Attempt, string(d.Data))

	r.Header.Set("Idempotency-Key", "shipment:o-2")
	r.Body = io.NopCloser(strings.NewReader(body))
	_, err = receiver.Read(r, v, 64<<10)
	fmt.Println(errors.Is(err, receiver.ErrEnvelope))
	// Output:
	// acme shipment:o-1 7 2 {"order_id":"o-1","quantity":2}
	// true
}
