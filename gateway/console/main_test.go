package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
	"golang.org/x/net/html"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/gateway/console"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/middleware/idempotency/memstore"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/reconcile"
)

// TestMain fails the package when a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const adminToken = "console-test-token"

// env is a gateway on real PostgreSQL and Redis with the console mounted
// on its admin listener, as `idemgate serve` mounts it: an enqueue route
// (invoices, on a private queue) and a proxied route (pages) whose
// upstream answers HTML, or JSON when the request mentions json, with
// a secret header and credentials, or a JSON document nested deepDepth
// deep when it mentions deep.
type env struct {
	g         *gateway.Gateway
	pool      *pgxpool.Pool
	store     *pgstore.Store
	records   *job.Store
	inspector *asynq.Inspector
	queue     string
	public    *httptest.Server
	admin     *httptest.Server
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupWith(t, func(*console.Options) {})
}

// setupWith is setup with the console's options adjusted by adjust.
func setupWith(t *testing.T, adjust func(*console.Options)) *env {
	t.Helper()
	pool := testkit.Pool(t)
	client, inspector, queue := testkit.Queue(t, "console")
	store := pgstore.New(pool, pgstore.WithInstance("gw-test"))
	t.Cleanup(store.Close)
	sub := job.NewSubmitter(pool, client)
	sub.Inspector = inspector

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Partner-Secret", "s3cr3t-header")
		w.Header().Set("Authorization", "Bearer s3cr3t-bearer")
		if strings.Contains(string(body), "deep") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, deepJSON(deepDepth))
			return
		}
		if strings.Contains(string(body), "json") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"p-1","client_secret":"s3cr3t-member","owner":{"password":"s3cr3t-nested","name":"<i>Ann</i>"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `<script>document.title="pwned"</script><b>made</b>`)
	}))
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	schema, err := os.ReadFile("testdata/invoice.create.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := job.NewSpec("invoice.create", schema, "invoice:{order_id}", "")
	if err != nil {
		t.Fatal(err)
	}
	x := &explain.Explainer{DB: pool, Keys: store, Claims: claimsOf(store)}
	sum := sha256.Sum256([]byte(adminToken))
	g, err := gateway.New(gateway.Options{
		Auth:             auth.Config{Mode: auth.ModeHeader, Header: "Idemgate-Tenant", Tenants: []auth.TenantKeys{{Name: "acme"}, {Name: "globex"}}},
		Store:            store,
		StoreName:        "postgres",
		AdminTokenSHA256: hex.EncodeToString(sum[:]),
		Jobs:             sub,
		Actions:          job.NewStore(pool),
		Explainer:        x,
		Logger:           slog.New(slog.DiscardHandler),
		Routes: []gateway.RouteOptions{
			{Name: "invoices", Methods: []string{http.MethodPost}, Path: "/v1/invoices", Enqueue: &gateway.EnqueueOptions{Spec: spec, Queue: queue}},
			{Name: "pages", Methods: []string{http.MethodPost}, Path: "/v1/pages", Upstream: upURL},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	co := console.Options{
		Stories: x, Keys: store, StoreName: "postgres", Requests: g.Recent(), KeyRequests: g.KeyHistory(), Routes: []string{"invoices", "pages"},
		Jobs:        job.NewStore(pool),
		Schedules:   job.NewSchedules(pool),
		Requeue:     job.NewRelay(sub, inspector, job.RelayOptions{}),
		DeadLetters: job.NewDeadLetters(sub, inspector),
		Cancel:      sub,
		Rerun: func(ctx context.Context, id string) (job.Row, error) {
			return sub.Rerun(ctx, id, func(task string) (*job.Spec, bool) { return spec, task == spec.Task })
		},
		Audit:      g.Audit(),
		Stuck:      console.StuckJobs(pool, reconcile.Options{StuckAfter: explain.DefaultStuckAfter}),
		QueuesPath: "/admin/queues",
		Logger:     slog.New(slog.DiscardHandler),
	}
	adjust(&co)
	h, err := console.New(co)
	if err != nil {
		t.Fatal(err)
	}
	g.AdminMount(console.DefaultPrefix, h)
	v := &env{g: g, pool: pool, store: store, records: job.NewStore(pool), inspector: inspector, queue: queue,
		public: httptest.NewServer(g.Handler()), admin: httptest.NewServer(g.AdminHandler())}
	t.Cleanup(v.public.Close)
	t.Cleanup(v.admin.Close)
	return v
}

// deepDepth is how deep the documents of the console's hostile tests
// nest: encoding/json's limit, past which a document is not JSON to it.
const deepDepth = 10000

// deepJSON is an object whose arrays and objects nest depth deep.
func deepJSON(depth int) string {
	return `{"order_id":"o-deep","x":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + "}"
}

// claimsOf reads pgstore's claim ledger for explain, as the command line
// wires it.
func claimsOf(st *pgstore.Store) func(context.Context, idempotency.Scope) ([]openapi.StoryClaim, error) {
	return func(ctx context.Context, scope idempotency.Scope) ([]openapi.StoryClaim, error) {
		claims, err := st.Claims(ctx, scope)
		out := make([]openapi.StoryClaim, len(claims))
		for i, c := range claims {
			out[i] = openapi.StoryClaim{FencingToken: c.FencingToken, Instance: c.Instance, ClaimedAt: c.ClaimedAt,
				Outcome: openapi.StoryClaimOutcome(c.Outcome)}
			if !c.EndedAt.IsZero() {
				end := c.EndedAt
				out[i].EndedAt = &end
			}
		}
		return out, err
	}
}

// call sends a public request as tenant with an Idempotency-Key.
func (v *env) call(t *testing.T, tenant, path, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, v.public.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idemgate-Tenant", tenant)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// invoice submits an invoice job through the gateway and returns its id.
func (v *env) invoice(t *testing.T, tenant, key, order string) string {
	t.Helper()
	resp := v.call(t, tenant, "/v1/invoices", key, `{"order_id":"`+order+`","amount_cents":1250,"currency":"EUR"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit %s: status %d", key, resp.StatusCode)
	}
	return job.ID(tenant, "invoices", key)
}

// noRedirect is a client that shows a 303 instead of following it.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// admin sends a request to the admin listener with the token as Basic
// credentials; header adds name, value pairs.
func (v *env) adminDo(t *testing.T, method, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, v.admin.URL+path, nil)
	req.SetBasicAuth("operator", adminToken)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// page GETs a console page, wants 200, and returns its parsed document.
func (v *env) page(t *testing.T, path string) *html.Node {
	t.Helper()
	resp, body := v.adminDo(t, http.MethodGet, path)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d\n%s", path, resp.StatusCode, body)
	}
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// post confirms an action (GET shows its form, POST performs it) and
// returns the answer to the POST.
func (v *env) post(t *testing.T, path string) *http.Response {
	t.Helper()
	doc := v.page(t, path)
	if byID(doc, "confirm-form") == nil || byID(doc, "confirm") == nil || text(byID(doc, "confirm-text")) == "" {
		t.Fatalf("GET %s: no confirmation form", path)
	}
	resp, _ := v.adminDo(t, http.MethodPost, path, "Origin", v.admin.URL, "Sec-Fetch-Site", "same-origin")
	return resp
}

// find returns every element under n that match says yes to, in order.
func find(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for c := range n.Descendants() {
		if c.Type == html.ElementNode && match(c) {
			out = append(out, c)
		}
	}
	return out
}

func attr(n *html.Node, name string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val, true
		}
	}
	return "", false
}

func byID(n *html.Node, id string) *html.Node {
	found := find(n, func(c *html.Node) bool { v, _ := attr(c, "id"); return v == id })
	if len(found) == 0 {
		return nil
	}
	return found[0]
}

func hasClass(n *html.Node, class string) bool {
	v, _ := attr(n, "class")
	for _, c := range strings.Fields(v) {
		if c == class {
			return true
		}
	}
	return false
}

// text is the text content of n, spaces collapsed; "" for nil.
func text(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// The stores that can list keys do, as the console expects.
var (
	_ console.RecentKeys = (*pgstore.Store)(nil)
	_ console.RecentKeys = (*memstore.Store)(nil)
)
