package idemgate_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/workers"
)

// Shipment is a job's payload.
type Shipment struct {
	OrderID  string `json:"order_id"`
	Quantity int    `json:"quantity"`
}

func book(ctx context.Context, db *pgxpool.Pool, job workers.Job[Shipment]) (string, error) {
	return "shp_" + job.Payload.OrderID, nil
}

// A program that ships its own Go-handler job: idemgate with one more
// task. Its main is the call below; declare shipment.book in the
// configuration's jobs: and run `yourbinary worker --config FILE`.
func Example() {
	run := func() {
		idemgate.Main(extension.WithHandlers([]string{"shipment.book"}, func(h *workers.Handlers, w extension.Worker) error {
			workers.Add(h, "shipment.book", func(ctx context.Context, job workers.Job[Shipment]) (string, error) {
				return book(ctx, w.DB, job)
			})
			return nil
		}))
	}
	_ = run // main() { run() }
	fmt.Println(extension.Apply(extension.WithHandlers([]string{"shipment.book"}, nil)).Tasks())
	// Output: [shipment.book]
}
