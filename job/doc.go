// Package job describes declared jobs: the task a request becomes, the
// JSON Schema its payload must satisfy, and the templates that form its
// identity. The business key ("shipment:{order_id}") is the job's
// identity, never an attempt's: within a tenant, one key is one effect.
// The resource ("order:{order_id}") is the entity the worker locks and
// fences on. A Spec is built once, from configuration, and is read by the
// gateway (to validate a request and name its job) and by the worker (to
// run it, with a Go handler or by HTTP delivery).
//
// Decode answers the two questions a gateway asks of a body, with the
// errors it maps to statuses: is it JSON at all (ErrMalformed, 400), and
// is it this job's payload (ErrInvalid, 422, with one FieldError per
// fault).
//
//	spec, err := job.NewSpec("shipment.book", schemaJSON, "shipment:{order_id}", "order:{order_id}")
//	p, err := spec.Decode(body)
//	// p.BusinessKey == "shipment:o-1"
//
// The package depends on the standard library, a JSON Schema compiler and
// the idempotency middleware's canonical JSON (itself standard library
// only), so that both sides can import it, and "the same payload" means
// what "the same body" means to the gateway.
package job
