// Package partnersim is a simulated partner API — a payment provider and a
// messaging service — that honours Idempotency-Key the way a good partner
// does: a repeated key returns the first result and applies nothing. It
// counts what it applied, so demos and tests can prove that an effect
// happened once. It can be told to fail before applying (--fail-rate) and to
// apply and then drop the connection without answering (--drop-rate), the
// ambiguous outcome that makes retries dangerous.
//
//	sim := partnersim.New(partnersim.Options{FailRate: 0.1, DropRate: 0.1})
//	http.ListenAndServe("127.0.0.1:9100", sim)
package partnersim
