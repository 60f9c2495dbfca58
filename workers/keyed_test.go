package workers

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

// keyedShipment derives its own business key and resource, ignoring the
// declaration's templates.
type keyedShipment struct {
	OrderID  string `json:"order_id"`
	Quantity int    `json:"quantity"`
}

func (s keyedShipment) BusinessKey() string { return "booking:" + s.OrderID }
func (s keyedShipment) Resource() string    { return "dock:" + s.OrderID }

var _ Keyed = keyedShipment{}

// TestKeyedPayloadNamesItsOwnKey: a Keyed payload's BusinessKey and
// Resource methods decide the job's key and lock, in place of the
// declared templates, and a second delivery replays on that key.
func TestKeyedPayloadNamesItsOwnKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls atomic.Int64
	hs := NewHandlers()
	Add(hs, kind, func(ctx context.Context, j Job[keyedShipment]) (string, error) {
		calls.Add(1)
		return "booked " + j.Key, nil
	})
	mux, err := hs.Mux(e.deps(nil, 5*time.Second), []*job.Spec{shipmentSpec(t)}, HTTPDelivery{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := mux.ProcessTask(t.Context(), tenantTask(t, "acme", `{"order_id": "o-9", "quantity": 1}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("business function ran %d times, want 1 (the second delivery is a replay)", n)
	}
	rec, err := e.store.Get(t.Context(), "acme", "booking:o-9")
	if err != nil || rec.Status != "succeeded" || rec.Resource != "acme/dock:o-9" {
		t.Fatalf("the record under the payload's own key: %+v %v, want succeeded on acme/dock:o-9", rec, err)
	}
	if _, err := e.store.Get(t.Context(), "acme", "effect:o-9"); err == nil {
		t.Fatal("a record under the declared template's key: the payload's BusinessKey must replace it")
	}
}

// A payload type with BusinessKey and Resource methods is Keyed: the
// worker takes the job's key and lock from them instead of from the
// declaration's business_key and resource templates.
func ExampleKeyed() {
	hs := NewHandlers()
	Add(hs, "shipment.book", func(ctx context.Context, j Job[keyedShipment]) (string, error) {
		return "booked " + j.Payload.OrderID, nil // j.Key is "booking:" + the order id
	})
	fmt.Println(hs.Tasks())
	// Output: [shipment.book]
}
