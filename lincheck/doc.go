// Package lincheck records what clients and servers did, operation by
// operation, and checks it against a model of idemgate's promise with a
// linearizability checker (github.com/anishathalye/porcupine).
//
// Counting (the chaos report's re-runs, split answers) says how often a
// promise broke; a history says whether any interleaving of what was
// observed could have come from a correct system, and when none can, which
// few operations prove it. KeyModel is idemgate's promise about one key,
// seen from outside: clients' requests and their answers, and the
// upstream's applications with their fencing tokens. Every final 2xx answer
// to a key carries the identity of the first one, and every application's
// token is above every earlier application's. The chaos suite checks every
// scenario with it. The stores' conformance suite
// (middleware/idempotency/idempotencytest) defines a Model of its own, a
// record's state machine as the idempotency.Store interface documents it.
//
// A leaf: porcupine and the standard library only, so a store's own
// conformance test, outside this module, can use it.
//
// A Recorder takes operations from any number of goroutines, timed with
// the monotonic clock; Check partitions them by key, checks each key, and
// reports each violating key with the shortest sub-history it found that
// still violates the model:
//
//	rec := lincheck.NewRecorder()
//	done := rec.Begin(client, key, lincheck.Request{})
//	… // the call
//	done(lincheck.Answer{Status: 201, ID: chargeID})
//	rec.Add(lincheck.Operation{Client: -1, Key: key, Input: lincheck.Apply{Token: t}, Call: at, Return: at})
//	res := lincheck.Check(lincheck.KeyModel(lincheck.KeyRules{Answers: true, Tokens: true}), rec.Operations(), 10*time.Second)
//	if !res.Ok() { fmt.Print(res) }
package lincheck
