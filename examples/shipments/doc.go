// Package shipments is the demo receiver of the shipment.book job: a
// service of the user's own that idemgate delivers jobs to over HTTP. It
// books a shipment once per (tenant, order) however often a job is
// delivered, and refuses an attempt superseded by a newer fencing token;
// all of that comes from package receiver, so the business function is one
// INSERT.
//
//	if err := shipments.EnsureSchema(ctx, pool); err != nil { ... }
//	mux.Handle("POST /hooks/shipments", shipments.New(verifier, pool))
//
// Command shipments-receiver serves it; `make run` starts it next to the
// gateway.
package shipments
