package client_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/openapi/client"
	"github.com/idemgate/idemgate/openapi/openapitest"
)

// Submitting a job twice with one Idempotency-Key: both answers name the
// same job, the second is a replay.
func ExampleClientWithResponses_CreateInvoiceWithResponse() {
	srv, err := openapitest.New(openapitest.Options(openapitest.NewJobs(), memstore.New()))
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	c, err := client.NewClientWithResponses(srv.Public.URL, client.WithHTTPClient(srv.Public.Client()),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+openapitest.APIKey)
			return nil
		}))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	params := &openapi.CreateInvoiceParams{IdempotencyKey: "inv-42"}
	body := openapi.InvoiceCreate{OrderId: "order-42", AmountCents: 4200, Currency: "EUR"}
	for range 2 {
		r, err := c.CreateInvoiceWithResponse(ctx, params, body)
		if err != nil {
			panic(err)
		}
		replayed := r.Headers202.IdempotentReplayed != nil
		fmt.Println(r.StatusCode(), r.JSON202.Id, r.JSON202.Status, "replayed:", replayed)
	}
	// Output:
	// 202 job_047ff1a14e372ce4f6bed7c60b312ad8 queued replayed: false
	// 202 job_047ff1a14e372ce4f6bed7c60b312ad8 queued replayed: true
}
