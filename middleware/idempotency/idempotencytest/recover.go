package idempotencytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// ClaimCompleteEach claims the scopes scope(0) to scope(n-1), all at once,
// for owner o, completes each one claimed, and returns every failure,
// joined; a scope another owner holds already counts as one. A store test
// runs it once the network to its server answers again, with more calls
// than the client has connections, so that the connections the outage
// broke and the new ones all serve some.
func ClaimCompleteEach(ctx context.Context, s idempotency.Store, n int, scope func(i int) idempotency.Scope) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range errs {
		wg.Go(func() {
			sc := scope(i)
			res, err := s.Claim(ctx, idempotency.ClaimRequest{Scope: sc, Fingerprint: "fp", Owner: "o", Lease: time.Minute, Retention: time.Hour})
			if err == nil && !res.Claimed {
				err = fmt.Errorf("%s not claimed: %+v", sc.Key, res.Record)
			}
			if err == nil {
				err = s.Complete(ctx, sc, "o", idempotency.Response{Status: 201}, time.Hour)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
