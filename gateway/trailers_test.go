package gateway

import (
	"io"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

// TestCookiesAndTrailersAreNotReplayed: Set-Cookie and Set-Cookie2 go to
// the first client only, never to a replay (a session meant for one
// client must not reach whoever retries with the key). Upstream trailers
// are not passed on, neither on the first answer nor on a replay, as
// trailers or as headers: the first answer and its replays carry the same
// fields.
func TestCookiesAndTrailersAreNotReplayed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ flush, undeclared bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		_, public := servePayments(t, testOptions(nil), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Checksum")
			w.Header().Set("Set-Cookie", "session=one")
			w.Header().Set("Set-Cookie2", "legacy=one")
			w.Header().Set("X-Kept", "yes")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"pay_1"}`)
			if tc.flush {
				http.NewResponseController(w).Flush()
			}
			w.Header().Set("X-Checksum", "abc")
			if tc.undeclared {
				w.Header().Set(http.TrailerPrefix+"X-Late", "late")
			}
		})

		first, _ := fetch(t, public, http.MethodPost, "/v1/payments", "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", "k")
		replay, _ := fetch(t, public, http.MethodPost, "/v1/payments", "Authorization", "Bearer "+testAPIKey, "Idempotency-Key", "k")
		if replay.Header.Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("%+v: the second answer is not a replay", tc)
		}
		if first.Header.Get("Set-Cookie") != "session=one" || first.Header.Get("Set-Cookie2") != "legacy=one" {
			t.Errorf("%+v: the first answer lost its cookies: %v", tc, first.Header)
		}
		for name, resp := range map[string]*http.Response{"first answer": first, "replay": replay} {
			if resp.Header.Get("X-Kept") != "yes" {
				t.Errorf("%+v: %s lost X-Kept", tc, name)
			}
			for _, h := range []string{"X-Checksum", "X-Late", "Trailer"} {
				if v := resp.Header.Get(h); v != "" {
					t.Errorf("%+v: %s has header %s: %q", tc, name, h, v)
				}
				if v := resp.Trailer.Get(h); v != "" {
					t.Errorf("%+v: %s has trailer %s: %q", tc, name, h, v)
				}
			}
		}
		for _, h := range []string{"Set-Cookie", "Set-Cookie2"} {
			if v := replay.Header.Get(h); v != "" {
				t.Errorf("%+v: the replay carries %s: %q", tc, h, v)
			}
		}
	}
}
