package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/reconcile"
)

// DefaultPrefix is where the console is mounted on the admin listener.
const DefaultPrefix = "/admin/ui"

// Stories tells the story of a job or a key (internal/explain.Explainer;
// gateway.Explainer is the same interface).
type Stories interface {
	Job(ctx context.Context, id string) (*explain.Story, error)
	Key(ctx context.Context, scope idempotency.Scope) (*explain.Story, error)
}

// Keys reads and repairs idempotency records; every idempotency.Store
// does.
type Keys interface {
	Get(ctx context.Context, scope idempotency.Scope) (idempotency.Record, error)
	Delete(ctx context.Context, scope idempotency.Scope) error
	Resolve(ctx context.Context, scope idempotency.Scope) error
}

// RecentKeys lists the most recently written records of a tenant and
// route, in state when it is not "". Stores that can list cheaply
// implement it (pgstore, memstore); the Redis store does not, since
// listing there means scanning the keyspace.
type RecentKeys interface {
	Recent(ctx context.Context, tenant, route string, state idempotency.State, limit int) ([]idempotency.Record, error)
}

// KeyPages pages through every live record of a tenant and route in key
// order, after the key after ("" starts at the first); next is "" on the
// last page (pgstore, memstore).
type KeyPages interface {
	Keys(ctx context.Context, tenant, route string, state idempotency.State, after string, limit int) (recs []idempotency.Record, next string, err error)
}

// Requeuer enqueues a job's task again when the queue lost it
// (*job.Relay, what `idemgate jobs requeue` runs).
type Requeuer interface {
	Requeue(ctx context.Context, id string) (job.Row, bool, error)
}

// Canceller cancels a job whatever its tenant, or the jobs a filter
// matches (*job.Submitter, what `idemgate jobs cancel`, POST
// /admin/jobs/{id}/cancel and POST /admin/jobs/cancel run).
type Canceller interface {
	CancelByID(ctx context.Context, id string) (job.Row, bool, error)
	CancelMatching(ctx context.Context, f job.ListFilter, limit int) ([]job.Row, error)
	CountCancellable(ctx context.Context, f job.ListFilter, limit int) (int, error)
}

// DeadLetters replays and deletes failed jobs (*job.DeadLetters, what
// `idemgate dlq` runs).
type DeadLetters interface {
	Replay(ctx context.Context, id string) (job.Row, error)
	Delete(ctx context.Context, id string) error
	// RunNow runs a job backing off at once (job.ErrNotBackingOff when
	// it is not).
	RunNow(ctx context.Context, id string) (job.Row, error)
}

// Options is what the console reads and acts through. Stories and Keys are
// required; without Jobs the job pages say that jobs need PostgreSQL.
type Options struct {
	// Prefix is where the console is mounted. Default DefaultPrefix.
	Prefix string
	// Stories tells a job's or a key's story.
	Stories Stories
	// Keys is the gateway's idempotency store.
	Keys Keys
	// Forget drops a record from the gateway's replay cache after a
	// delete (idempotency.ReplayCache.Forget); nil when there is none.
	Forget func(idempotency.Scope)
	// Jobs reads the jobs table; nil when the gateway has no database.
	Jobs *job.Store
	// Requeue and DeadLetters act on jobs; nil leaves their actions out
	// (the gateway has no Redis).
	Requeue     Requeuer
	DeadLetters DeadLetters
	// Cancel cancels jobs; nil leaves the action out.
	Cancel Canceller
	// Rerun submits a cancelled or failed job again as a new job and
	// returns it (job.Submitter.Rerun with the configured jobs); nil
	// leaves the action out.
	Rerun func(ctx context.Context, id string) (job.Row, error)
	// MaxBulk is the most jobs a bulk action acts on. Default
	// job.MaxBulk.
	MaxBulk int
	// Audit records every action in the audit trail (the gateway's
	// Gateway.Audit); nil records none.
	Audit *gateway.Audit
	// Schedules reads the recurring schedules; nil when the gateway has
	// no database.
	Schedules *job.Schedules
	// Fairness reads the fairness pools; nil when none is declared.
	Fairness Fairness
	// Stuck lists the stuck jobs (StuckJobs); nil leaves them out.
	Stuck func(ctx context.Context) ([]reconcile.Violation, error)
	// Requests are the gateway's recent requests by tenant and route.
	Requests *gateway.RecentRequests
	// KeyRequests are the last requests of each idempotency key at this
	// instance (Gateway.KeyHistory); nil shows none.
	KeyRequests *gateway.KeyHistory
	// Routes are the configured routes' names, for the key lookup form.
	Routes []string
	// StoreName names the idempotency store in messages ("redis").
	StoreName string
	// QueuesPath is where the queue UI is mounted; "" when it is not.
	QueuesPath string
	// Interval is how often an open job or key page asks whether it
	// changed. Default DefaultInterval.
	Interval time.Duration
	Logger   *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// DefaultInterval is Options.Interval's default.
const DefaultInterval = 2 * time.Second

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	o.Prefix = strings.TrimSuffix(o.Prefix, "/")
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if o.Stories == nil {
		errs = append(errs, errors.New("console: Stories is required"))
	}
	if o.Keys == nil {
		errs = append(errs, errors.New("console: Keys is required"))
	}
	if !strings.HasPrefix(o.Prefix, "/") {
		errs = append(errs, fmt.Errorf("console: prefix %q does not start with /", o.Prefix))
	}
	return errors.Join(errs...)
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// console serves the pages.
type console struct {
	opts  Options
	pages map[string]*template.Template
}

// New returns the console's handler. Mount it on the admin listener
// (gateway.AdminMount), which checks the admin token and refuses
// cross-origin POSTs before a request reaches it.
func New(opts Options) (http.Handler, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &console{opts: opts, pages: map[string]*template.Template{}}
	for _, page := range []string{"overview", "jobs", "job", "keys", "key", "confirm", "error", "failed", "bulk", "search", "batch", "schedules", "schedule", "fairness", "pool"} {
		t, err := template.New("layout.html").Funcs(c.funcs()).ParseFS(templateFS, "templates/layout.html", "templates/audit.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", page, err)
		}
		c.pages[page] = t
	}
	return c.routes(), nil
}

func (c *console) routes() http.Handler {
	static, _ := fs.Sub(staticFS, "static")
	r := chi.NewRouter()
	r.Use(gateway.RouteEscaped, secureHeaders)
	p := c.opts.Prefix
	r.Get(p, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, p+"/", http.StatusMovedPermanently) })
	r.Get(p+"/", c.handleOverview)
	r.Handle(p+"/static/*", http.StripPrefix(p+"/static/", staticHandler(http.FileServerFS(static))))
	r.Get(p+"/search", c.handleSearch)
	r.Get(p+"/jobs", c.handleJobs)
	r.Get(p+"/failed", c.handleFailed)
	r.Get(p+"/failed/{action}", c.handleBulkConfirm)
	r.Post(p+"/failed/{action}", c.handleBulkAction)
	r.Get(p+"/jobs/cancel", c.handleBulkCancelConfirm)
	r.Post(p+"/jobs/cancel", c.handleBulkCancel)
	r.Get(p+"/jobs/{id}", c.handleJob)
	r.Get(p+"/jobs/{id}/live", c.handleJobLive)
	r.Get(p+"/jobs/{id}/{action}", c.handleJobConfirm)
	r.Post(p+"/jobs/{id}/{action}", c.handleJobAction)
	r.Get(p+"/batches/{id}", c.handleBatch)
	r.Get(p+"/schedules", c.handleSchedules)
	r.Get(p+"/schedules/{tenant}/{id}", c.handleSchedule)
	r.Get(p+"/fairness", c.handleFairness)
	r.Get(p+"/fairness/{pool}", c.handleFairPool)
	r.Get(p+"/keys", c.handleKeys)
	r.Get(p+"/keys/{tenant}/{route}/{key}", c.handleKey)
	r.Get(p+"/keys/{tenant}/{route}/{key}/live", c.handleKeyLive)
	r.Get(p+"/keys/{tenant}/{route}/{key}/{action}", c.handleKeyConfirm)
	r.Post(p+"/keys/{tenant}/{route}/{key}/{action}", c.handleKeyAction)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "There is no console page at "+r.URL.Path+".")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusMethodNotAllowed, r.Method+" is not allowed here.")
	})
	return r
}

// contentSecurityPolicy keeps every page on the admin listener's origin:
// our own stylesheet and script only, no inline script, no frame.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// staticHandler lets the browser keep the stylesheet and script for a
// while: they change only with the binary.
func staticHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		next.ServeHTTP(w, r)
	})
}

// page is what every template gets.
type page struct {
	Title  string
	Prefix string
	// Flash says what an action did (from ?done=); FlashError what failed.
	Flash      string
	FlashError bool
	// Live is the JSON address the script polls; "" for a page that does
	// not update itself.
	Live string
	// Version is the live document's version when the page was made.
	Version    string
	Interval   int64
	QueuesPath string
	Data       any
}

func (c *console) render(w http.ResponseWriter, r *http.Request, status int, name, title string, p page) {
	p.Title, p.Prefix, p.QueuesPath = title, c.opts.Prefix, c.opts.QueuesPath
	p.Interval = c.opts.Interval.Milliseconds()
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, p); err != nil {
		c.opts.Logger.ErrorContext(r.Context(), "console: rendering a page failed", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders the error page with msg in #flash.error.
func (c *console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "error", http.StatusText(status), page{Flash: msg, FlashError: true})
}

// storeFailed renders the error page for a store that could not be read;
// the cause is logged, not shown.
func (c *console) storeFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	c.opts.Logger.WarnContext(r.Context(), "console: "+what+" failed", "err", err)
	c.fail(w, r, http.StatusServiceUnavailable, "The stores could not be read ("+what+"); reload in a moment.")
}

// jobURL and keyURL are the console's stable addresses, each segment
// percent-encoded once.
func (c *console) jobURL(id string) string { return c.opts.Prefix + "/jobs/" + url.PathEscape(id) }

func (c *console) keyURL(s idempotency.Scope) string {
	return c.opts.Prefix + "/keys/" + url.PathEscape(s.Tenant) + "/" + url.PathEscape(s.Route) + "/" + url.PathEscape(s.Key)
}

// seeOther answers a POST with 303 to target, with done naming what
// happened (the flash the next page shows, from a fixed table).
func seeOther(w http.ResponseWriter, r *http.Request, target, done string) {
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	http.Redirect(w, r, target+sep+"done="+url.QueryEscape(done), http.StatusSeeOther)
}

// flashOf is what the page after an action says, by ?done=. Only these
// texts are shown: the parameter itself never reaches the page.
func flashOf(r *http.Request) string {
	n, _ := strconv.Atoi(r.URL.Query().Get("n"))
	switch r.URL.Query().Get("done") {
	case "bulk-replay":
		return "Replayed " + strconv.Itoa(n) + " failed job" + plural(n) + ": each is queued again and its task is back in the queue."
	case "bulk-cancel":
		return "Cancelled " + strconv.Itoa(n) + " job" + plural(n) + ": each waiting one is cancelled, each with an attempt in flight is cancelling until that attempt ends."
	case "bulk-delete":
		return "Deleted " + strconv.Itoa(n) + " failed job" + plural(n) + ": their records and tasks are gone."
	case "requeued":
		return "Requeued: the job's task was enqueued again; a worker picks it up."
	case "present":
		return "Nothing to requeue: the queue still holds the job's task."
	case "already-succeeded":
		return "Nothing to requeue: the job already succeeded."
	case "replayed":
		return "Replayed: the failed job is queued again and its task is back in the queue."
	case "run-now":
		return "Run now: the job's task is due at once; a worker picks it up."
	case "rerun":
		return "Re-run: this is the new job, submitted with the payload of the job it re-runs; a worker picks it up."
	case "cancelled":
		return "Cancelled: no attempt of the job starts any more."
	case "cancelling":
		return "Cancelling: an attempt is in flight; its end decides between succeeded and cancelled."
	case "job-deleted":
		return "Deleted: the failed job's record and its task are gone."
	case "resolved":
		return "Resolved: the unknown outcome is released; the next retry with this key runs again."
	case "key-deleted":
		return "Deleted: the idempotency record is gone; the next request with this key runs as a new one."
	}
	return ""
}
