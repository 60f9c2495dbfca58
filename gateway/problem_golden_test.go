package gateway

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/middleware/ratelimit"
	"github.com/idemgate/idemgate/middleware/requestid"
	"github.com/idemgate/idemgate/problem"
)

var update = flag.Bool("update", false, "rewrite testdata/problems.golden")

// TestProblemDocumentsAreGolden pins, byte for byte, every problem document
// the gateway answers with: each row of its table as a bare sentinel, as a
// carrier with every member filled and under an idempotency claim, then
// the unknown error, the empty key, the 401 challenge, the middleware's
// DefaultErrorHandler and the rate limiter's DefaultOnLimited. Status,
// headers and body are compared. go test ./gateway -run
// TestProblemDocumentsAreGolden -update rewrites the file.
func TestProblemDocumentsAreGolden(t *testing.T) {
	t.Parallel()
	pw := NewProblemWriter(problem.DefaultBase, slog.New(slog.DiscardHandler))
	var out bytes.Buffer
	n := 0
	write := func(name string, w *httptest.ResponseRecorder) {
		n++
		fmt.Fprintf(&out, "### %s\n%d\n", name, w.Code)
		keys := make([]string, 0, len(w.Header()))
		for k := range w.Header() {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v := strings.Join(w.Header()[k], ", ")
			if k == idempotency.HeaderKeyExpires {
				v = "(a date)" // the claim's expiry, from the clock
			}
			fmt.Fprintf(&out, "%s: %s\n", k, v)
		}
		body := w.Body.String()
		if strings.HasPrefix(name, "default ") {
			body = uuid.ReplaceAllString(body, "urn:uuid:RANDOM") // the zero writer names no request
		}
		out.WriteString(body)
	}
	answer := func(h http.Handler, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{}`))
		r.Header.Set(requestid.Header, "req-1")
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		requestid.Middleware(h).ServeHTTP(w, r)
		return w
	}
	writing := func(pw problem.Writer, err error) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { pw.Write(w, r, err) })
	}
	full := func(sentinel error) error {
		return &problem.Error{
			Err: sentinel, Detail: `the "detail" <of> this & that`, RetryAfter: 1500 * time.Millisecond,
			Key: "order-42", AcceptEncoding: "gzip, identity",
			Fields: []problem.FieldFault{{Field: "items[2].sku", Message: "is required"}, {Field: "", Message: "too large"}},
			Cause:  errors.New("the logged cause"),
		}
	}
	mw, err := idempotency.New(memstore.New(), idempotency.Config{Route: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mw.Drain(context.Background()) })
	for i, p := range pw.Table {
		name := fmt.Sprintf("%02d %s", i, p.Slug)
		write(name+" bare", answer(writing(pw, p.Err)))
		write(name+" full", answer(writing(pw, full(p.Err))))
		claimed := &problem.Error{Err: p.Err, Detail: "under a claim"}
		write(name+" claimed", answer(mw.Wrap(writing(pw, claimed)), "Idempotency-Key", fmt.Sprintf(`"claim-%d"`, i)))
	}
	write("unknown", answer(writing(pw, errors.New("boom"))))
	write("unknown carried", answer(writing(pw, full(errors.New("boom")))))
	_, emptyKey := idempotency.ParseKey([]string{" "}, idempotency.KeyCompat, idempotency.DefaultMaxKeyLength)
	write("empty key", answer(writing(pw, emptyKey)))
	challenged := pw
	challenged.Challenge = `Bearer realm="idemgate"`
	write("challenge", answer(writing(challenged, &problem.Error{Err: auth.ErrUnauthorized, Detail: "no token"})))
	for _, p := range idempotency.Refusals() {
		write("default "+p.Slug, answer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			idempotency.DefaultErrorHandler(w, r, full(p.Err))
		})))
	}
	limited := &problem.Error{Err: ratelimit.ErrLimited, RetryAfter: 3 * time.Second,
		Cause: &ratelimit.LimitedError{Tenant: "acme", Limit: ratelimit.Limit{Tokens: 5, Interval: time.Second}}}
	write("ratelimit default", answer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ratelimit.DefaultOnLimited(w, r, limited)
	})))
	t.Logf("%d problem documents", n)
	if *update {
		if err := os.WriteFile("testdata/problems.golden", out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("testdata/problems.golden")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		got, want := strings.Split(out.String(), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("line %d differs:\n got %s\nwant %s", i+1, got[i], want[i])
			}
		}
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
}

var uuid = regexp.MustCompile(`urn:uuid:[0-9a-f-]{36}`)
