// Package ratelimittest is the conformance suite every rate-limit store
// must pass: a limiter.Store (github.com/sethvargo/go-limiter) with the
// semantics of ratelimit.Memory and redislimit — a key gets Tokens per
// Interval, the interval starts at the key's first Take and the budget
// refills in full when it ends, exactly for any budget the store accepts.
// A store's own test calls Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		ratelimittest.Run(t, func(t *testing.T, tokens uint64, interval time.Duration) limiter.Store {
//			s, err := ratelimit.NewMemory(ratelimit.MemoryConfig{Tokens: tokens, Interval: interval})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { _ = s.Close(context.Background()) })
//			return s
//		}, ratelimittest.MaxTokens(math.MaxUint64))
//	}
//
// The suite uses real time, as a store on a server's clock must: the
// intervals that have to end are short (a few hundred milliseconds), and
// every check is stated per interval — what the takes that reported one
// reset saw — instead of per instant, so a loaded machine that lets an
// interval end between two takes changes which interval a take falls in,
// never the verdict. The resets Take reports are compared with the test's
// clock give or take a couple of seconds, so the store's clock (Redis's
// TIME) must be the host's.
package ratelimittest
