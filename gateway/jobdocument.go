package gateway

import (
	"github.com/idemgate/idemgate/job"
)

// JobDocument is the job document the gateway shows for j (GET
// /v1/jobs/{id}, the 202 of an enqueue route): the worker's final-status
// callbacks carry the same one, so a receiver reads what a poller would.
func JobDocument(j job.Row) any { return jobDocument(j) }
