// Package client is the Go producer SDK for an idemgate gateway: it makes
// one logical call safe to retry. Do gives the call one Idempotency-Key (a
// UUIDv7, or a business key the caller has, with WithKey) and sends the
// same key and the same body bytes on every attempt, so however many
// attempts reach the gateway, the upstream runs the request once and every
// later attempt gets the stored answer (Response.Replayed).
//
// Do retries what means "not processed, try again" — a network error, a
// problem whose retryable member is true, and in documents without one
// 408, 409 idempotency-key-in-use (the first attempt still runs), 425,
// 429, 502, 503, 504 — with exponential backoff and full jitter, never sooner
// than the gateway's Retry-After, within Retry's MaxAttempts and
// MaxElapsed and the context. Every other answer is final. A 4xx or 5xx
// comes back as a *ProblemError (its RFC 9457 problem document), matched
// by its type's last segment with IsKeyReused, IsOutcomeUnknown and
// IsInvalidPayload. Redirects are never followed, on any method: a 3xx
// with a Location is a final *RedirectError naming it, and nothing is sent
// there, so the API key, the body and the Idempotency-Key reach no host
// but the base URL's. SubmitJob posts to an enqueue route and WaitJob polls
// the job until it has ended; ListJobs reads a page of the tenant's jobs
// and AllJobs ranges over all of them.
//
//	c := client.New("https://gateway.example.com", client.WithAPIKey(key))
//	resp, err := c.Do(ctx, "POST", "/v1/payments", payment)
//	if err != nil { … } // a *ProblemError, or errors.Is(err, client.ErrRetriesExhausted)
//	fmt.Println(resp.Status, resp.Replayed, resp.Key, resp.Attempts)
//
// When a call may outlive the process (a crash between attempts), derive
// the key from the business operation, WithKey("order-42-charge"), so the
// call repeated after a restart is the same request to the gateway.
package client
