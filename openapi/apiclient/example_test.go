package apiclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemgate/idemgate/gateway/gatewaytest"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/openapi/apiclient"
)

// Submitting a job twice with one Idempotency-Key, then reading it:
// both answers name the same job, the second is a replay. Enqueue routes
// are configuration, so the job is posted as plain JSON; the job
// document and GET /v1/jobs/{id} are the client's.
func ExampleClientWithResponses_GetJobWithResponse() {
	srv, err := gatewaytest.New(gatewaytest.Options(gatewaytest.NewQueue(), memstore.New()))
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx := context.Background()
	auth := func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+gatewaytest.APIKey)
		return nil
	}

	var job openapi.Job
	for range 2 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.Public.URL+"/v1/invoices",
			strings.NewReader(`{"order_id": "order-42", "amount_cents": 4200, "currency": "EUR"}`))
		if err != nil {
			panic(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "inv-42")
		_ = auth(ctx, req)
		resp, err := srv.Public.Client().Do(req)
		if err != nil {
			panic(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&job)
		resp.Body.Close()
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.StatusCode, job.Id, job.Status, "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}

	c, err := apiclient.NewClientWithResponses(srv.Public.URL, apiclient.WithHTTPClient(srv.Public.Client()), apiclient.WithRequestEditorFn(auth))
	if err != nil {
		panic(err)
	}
	r, err := c.GetJobWithResponse(ctx, job.Id, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.StatusCode(), r.JSON200.Task, r.JSON200.Status)
	// Output:
	// 202 job_047ff1a14e372ce4f6bed7c60b312ad8 queued replayed: false
	// 202 job_047ff1a14e372ce4f6bed7c60b312ad8 queued replayed: true
	// 200 invoice.create queued
}
