package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/telemetry"
)

// BatchOptions gives an enqueue route a batch path: one POST there
// submits up to MaxItems jobs of the route, each under its own key in
// the route's scope.
type BatchOptions struct {
	// Path is the batch path, such as /v1/emails:batch. Required.
	Path string
	// MaxItems is the most items one batch holds, at most
	// job.MaxBatchItems. Default job.MaxBatchItems.
	MaxItems int
}

// BatchSubmitter is what the batch paths need of Options.Jobs: a
// *job.Submitter is one.
type BatchSubmitter interface {
	SubmitBatch(ctx context.Context, b job.Batch) ([]job.Row, error)
	Batch(ctx context.Context, tenant, id string) (job.BatchState, error)
}

// ErrBatchRefused refuses an atomic batch one of whose items failed: 422
// batch-refused, naming each failing item, with nothing recorded.
var ErrBatchRefused = errors.New("batch refused")

// batchRouteSuffix names a batch path's idempotency scope after its
// route's: a route name cannot hold a colon, so no configured route
// shares it.
const batchRouteSuffix = ":batch"

// batchRequest is the body of a batch submit.
type batchRequest struct {
	Items  []batchItem `json:"items"`
	Atomic bool        `json:"atomic"`
}

// batchItem is one item of a batch: what a request sent alone to the
// route would carry, its body, its key and its schedule headers.
type batchItem struct {
	IdempotencyKey *string          `json:"idempotency_key"`
	Body           json.RawMessage  `json:"body"`
	Delay          json.RawMessage  `json:"delay"`
	NotBefore      *json.RawMessage `json:"not_before"`
}

// batchDocument is the 200 of a batch submit: the BatchResult of
// openapi.yaml.
type batchDocument struct {
	BatchID string              `json:"batch_id"`
	Items   []batchItemDocument `json:"items"`
	Counts  batchCounts         `json:"counts"`
}

// batchItemDocument is one item's answer: the status and body a request
// sent alone with its key would have had, a job document or a problem.
type batchItemDocument struct {
	Index   int             `json:"index"`
	Status  int             `json:"status"`
	Job     json.RawMessage `json:"job,omitempty"`
	Problem json.RawMessage `json:"problem,omitempty"`
}

// batchCounts counts a batch's items by outcome.
type batchCounts struct {
	// Accepted items have a job: recorded now, or before with the
	// item's key.
	Accepted int `json:"accepted"`
	// Rejected items were refused, each with its problem.
	Rejected int `json:"rejected"`
}

// batchRoute is what the batch handler knows of the single route whose
// jobs it submits.
type batchRoute struct {
	name   string // the single route's
	method string // the method a request sent alone would use
	path   string
	eo     EnqueueOptions
	bo     BatchOptions
	single *idempotency.Middleware
}

// buildBatchRoute builds the batch path of the enqueue route ro, whose
// requests the middleware single guards.
func (g *Gateway) buildBatchRoute(ro RouteOptions, single *idempotency.Middleware, store idempotency.Store) (*route, error) {
	bo := *ro.Enqueue.Batch
	if bo.Path == "" || !strings.HasPrefix(bo.Path, "/") {
		return nil, errors.New("a batch path must start with /")
	}
	if bo.MaxItems == 0 {
		bo.MaxItems = job.MaxBatchItems
	}
	if bo.MaxItems < 1 || bo.MaxItems > job.MaxBatchItems {
		return nil, fmt.Errorf("batch max_items %d is outside 1..%d", bo.MaxItems, job.MaxBatchItems)
	}
	if _, ok := g.opts.Jobs.(BatchSubmitter); !ok {
		return nil, errors.New("a batch path needs a job queue that submits batches")
	}
	if ro.Prefix {
		return nil, errors.New("a batch path needs an enqueue route with an exact path")
	}
	method := http.MethodPost
	if len(ro.Methods) > 0 && !slices.ContainsFunc(ro.Methods, func(m string) bool { return strings.EqualFold(m, http.MethodPost) }) {
		method = strings.ToUpper(ro.Methods[0])
	}
	name := ro.Name + batchRouteSuffix
	ic := ro.Idempotency
	ic.Route = name
	ic.Tenant = func(r *http.Request) string { return auth.Tenant(r.Context()) }
	ic.ErrorHandler = g.problems.Write
	ic.ReplayCache = g.opts.ReplayCache
	ic.Observe = observeIdempotency
	ic.Logger = g.opts.Logger
	mw, err := idempotency.New(store, ic)
	if err != nil {
		return nil, err
	}
	g.guards = append(g.guards, mw)
	br := batchRoute{name: ro.Name, method: method, path: ro.Path, eo: *ro.Enqueue, bo: bo, single: single}
	h := g.tenantChain(mw.Wrap(g.handleBatch(br, mw.Config().CommitTimeout)))
	return &route{
		name: name, path: bo.Path, kind: KindEnqueue,
		methods: map[string]bool{http.MethodPost: true},
		handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			infoFrom(r.Context()).route = name
			telemetry.SetRoute(r, name)
			h.ServeHTTP(w, r)
		}),
	}, nil
}

// handleBatch submits a batch of jobs. It runs inside the batch path's
// idempotency middleware, so its 200 is the stored answer a retry with
// the batch's key replays, byte for byte. Each item is claimed under its
// own key in the single route's scope and answered with what a request
// sent alone would have had (jobAccepted, or a problem); every job it
// records commits in one transaction before the answer.
func (g *Gateway) handleBatch(br batchRoute, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := g.claimed(w, r, "no job was queued", "a batch needs an Idempotency-Key")
		if !ok {
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
			g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest, Detail: "the body must be application/json"})
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			g.problems.Write(w, r, &problem.Error{Err: ErrBadRequest, Detail: "the request body could not be read", Cause: err})
			return
		}
		req, err := decodeBatch(body, br.bo.MaxItems)
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		keys, err := g.itemKeys(br.single, a.Scope.Key, req.Items)
		if err != nil {
			g.problems.Write(w, r, err)
			return
		}
		// The tenant's rate limit counts items: the request spent one
		// token, its other items spend theirs before any item is claimed.
		if err := g.limiter.TakeN(r, w.Header(), uint64(len(req.Items)-1)); err != nil {
			infoFrom(r.Context()).outcome = "rate_limited"
			g.problems.Write(w, r, err)
			return
		}
		g.submitBatch(w, r, br, a, req, keys, timeout)
	})
}

// decodeBatch reads a batch's body: 1 to max items, each with a body.
func decodeBatch(body []byte, max int) (batchRequest, error) {
	var req batchRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	bad := func(format string, args ...any) (batchRequest, error) {
		return batchRequest{}, &problem.Error{Err: ErrBadRequest, Detail: fmt.Sprintf(format, args...)}
	}
	if err := dec.Decode(&req); err != nil {
		return bad("the body must be a JSON object {\"items\": [{\"idempotency_key\", \"body\", \"delay\" | \"not_before\"}…], \"atomic\": false}: %v", err)
	}
	if dec.More() {
		return bad("the body must hold one JSON object")
	}
	switch n := len(req.Items); {
	case n == 0:
		return bad("items must hold at least one item")
	case n > max:
		return bad("items holds %d items, more than this route's batch takes (%d)", n, max)
	}
	var missing []problem.FieldFault
	for i, it := range req.Items {
		if len(it.Body) == 0 {
			missing = append(missing, problem.FieldFault{Field: fmt.Sprintf("/items/%d/body", i), Message: "required"})
		}
	}
	if len(missing) > 0 {
		return batchRequest{}, &problem.Error{Err: ErrBadRequest, Detail: "every item needs a body", Fields: missing}
	}
	return req, nil
}

// itemKeys returns each item's key: its own, checked as an Idempotency-Key
// header would be, or, unless the configuration requires item keys, the
// batch's key and its index. Two items with one key are refused, naming
// every index of each key, before anything is claimed.
func (g *Gateway) itemKeys(single *idempotency.Middleware, batchKey string, items []batchItem) ([]string, error) {
	keys := make([]string, len(items))
	var faults []problem.FieldFault
	var missing []string
	for i, it := range items {
		field := fmt.Sprintf("/items/%d/idempotency_key", i)
		if it.IdempotencyKey == nil {
			if g.opts.RequireItemKeys {
				missing = append(missing, strconv.Itoa(i))
				faults = append(faults, problem.FieldFault{Field: field, Message: "required (jobs_api.batch.require_item_keys)"})
				continue
			}
			keys[i] = batchKey + ":" + strconv.Itoa(i)
		} else {
			keys[i] = *it.IdempotencyKey
		}
		if _, err := single.ItemKey(keys[i]); err != nil {
			msg := err.Error()
			if re, ok := errors.AsType[*problem.Error](err); ok {
				msg = re.Detail
			}
			faults = append(faults, problem.FieldFault{Field: field, Message: msg})
		}
	}
	if len(missing) > 0 {
		return nil, &problem.Error{Err: ErrBadRequest, Fields: faults,
			Detail: "every item needs its own idempotency_key; missing at items " + strings.Join(missing, ", ")}
	}
	if len(faults) > 0 {
		return nil, &problem.Error{Err: ErrBadRequest, Fields: faults, Detail: "an item's idempotency_key is not a valid Idempotency-Key"}
	}
	at := map[string][]int{}
	for i, k := range keys {
		at[k] = append(at[k], i)
	}
	var dups []string
	for i, k := range keys {
		if idx := at[k]; len(idx) > 1 && idx[0] == i {
			s := make([]string, len(idx))
			for j, n := range idx {
				s[j] = strconv.Itoa(n)
				faults = append(faults, problem.FieldFault{Field: fmt.Sprintf("/items/%d/idempotency_key", n), Message: "the key of items " + strings.Trim(fmt.Sprint(idx), "[]")})
			}
			dups = append(dups, strings.Join(s, ", "))
		}
	}
	if len(dups) > 0 {
		return nil, &problem.Error{Err: ErrBadRequest, Fields: faults,
			Detail: "items share an idempotency_key, which would make them one job: items " + strings.Join(dups, "; items ")}
	}
	return keys, nil
}

// itemState is one item on its way through a batch.
type itemState struct {
	doc   batchItemDocument
	req   job.Request
	claim idempotency.ItemClaim
	// jobID is the item's job once it is accepted.
	jobID string
}

// submitBatch checks each item as a request sent alone would be, claims
// the items' keys, records the claimed ones' jobs and answers.
func (g *Gateway) submitBatch(w http.ResponseWriter, r *http.Request, br batchRoute, a *idempotency.Attempt, req batchRequest, keys []string, timeout time.Duration) {
	tenant := a.Scope.Tenant
	states := make([]itemState, len(req.Items))
	items := make([]idempotency.Item, 0, len(req.Items))
	at := make([]int, 0, len(req.Items))
	now := time.Now()
	for i, it := range req.Items {
		st := &states[i]
		st.doc.Index = i
		header := itemHeader(r.Header, it)
		sched, err := parseSchedule(header)
		if err == nil {
			err = br.eo.Spec.CheckSchedule(sched, now)
		}
		st.req = job.Request{Tenant: tenant, Route: br.name, Key: keys[i], Spec: br.eo.Spec, Queue: br.eo.Queue,
			Body: it.Body, Schedule: sched, MaxDepth: g.opts.MaxDepth}
		if err == nil {
			_, err = st.req.Decode()
		}
		if err != nil {
			g.refuseItem(r, st, keys[i], jobProblem(err))
			continue
		}
		items = append(items, idempotency.Item{Key: keys[i], Method: br.method, Path: br.path,
			ContentType: "application/json", Header: header, Body: it.Body})
		at = append(at, i)
	}

	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	claims, err := br.single.ClaimItems(ctx, tenant, items)
	if err != nil {
		g.problems.Write(w, r, &problem.Error{Err: idempotency.ErrStoreUnavailable,
			Detail: "the idempotency store is unavailable; no job was queued, retry with the same key", RetryAfter: time.Second, Cause: err})
		return
	}
	var claimed []idempotency.ItemClaim
	for k, c := range claims {
		st := &states[at[k]]
		st.claim = c
		switch {
		case c.Err != nil:
			g.refuseItem(r, st, c.Scope.Key, c.Err)
		case c.Replay != nil:
			replayItem(st, *c.Replay)
		default:
			claimed = append(claimed, c)
		}
	}
	release := func() {
		// The claims were made for nothing: let them go, whatever became
		// of this request.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
		defer cancel()
		if err := br.single.ReleaseItems(rctx, claimed); err != nil {
			g.opts.Logger.WarnContext(r.Context(), "batch: item claims not released; they are freed when their lease ends", "err", err)
		}
	}
	var failing []problem.FieldFault
	for i := range states {
		if st := &states[i]; st.doc.Problem != nil {
			failing = append(failing, problem.FieldFault{Field: fmt.Sprintf("/items/%d", i), Message: problemDetail(st.doc.Problem)})
		}
	}
	if req.Atomic && len(failing) > 0 {
		release()
		idx := make([]string, len(failing))
		for i, f := range failing {
			idx[i] = strings.TrimPrefix(f.Field, "/items/")
		}
		g.problems.Write(w, r, &problem.Error{Err: ErrBatchRefused, Fields: failing,
			Detail: "the batch is atomic, and these items failed: " + strings.Join(idx, ", ") + "; nothing was recorded"})
		return
	}

	b := job.Batch{Tenant: tenant, Route: a.Scope.Route, Key: a.Scope.Key, Items: len(req.Items)}
	var recorded []int
	for i := range states {
		st := &states[i]
		switch {
		case st.claim.Claimed:
			b.Requests = append(b.Requests, st.req)
			recorded = append(recorded, i)
		case st.jobID != "":
			b.Existing = append(b.Existing, st.jobID)
		}
	}
	ctx, span := telemetry.StartEnqueue(ctx, br.eo.Spec.Task, job.Request{Spec: br.eo.Spec, Queue: br.eo.Queue}.QueueName(), telemetry.Tenant(tenant), telemetry.Route(a.Scope.Route))
	recs, err := g.opts.Jobs.(BatchSubmitter).SubmitBatch(ctx, b)
	telemetry.End(span, err)
	if errors.Is(err, job.ErrTaskDeferred) {
		// The records are committed, so the jobs are accepted: the relay
		// enqueues the tasks that were not sent.
		g.opts.Logger.WarnContext(r.Context(), "batch accepted, some of its tasks not enqueued yet (the relay will)",
			"batch_id", b.ID(), "task", br.eo.Spec.Task, "err", err)
		err = nil
	}
	if err != nil {
		release()
		g.jobError(w, r, err)
		return
	}
	outs := make([]idempotency.ItemOutcome, len(recorded))
	for k, i := range recorded {
		st, j := &states[i], recs[k]
		resp := jobAccepted(j)
		st.doc.Status, st.doc.Job, st.jobID = resp.Status, resp.Body, j.ID
		outs[k] = idempotency.ItemOutcome{Claim: st.claim, Response: resp}
		if j.NotBefore != nil {
			outs[k].RetainAfter = *j.NotBefore
		}
	}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
	defer scancel()
	if err := br.single.CompleteItems(sctx, outs); err != nil {
		// The jobs are recorded under ids their keys derive: a retry of
		// an item whose answer was not stored finds the same job.
		g.opts.Logger.WarnContext(r.Context(), "batch: some items' answers not stored; a retry with their keys finds the same jobs", "batch_id", b.ID(), "err", err)
	}

	doc := batchDocument{BatchID: b.ID(), Items: make([]batchItemDocument, len(states))}
	for i := range states {
		doc.Items[i] = states[i].doc
		if states[i].jobID != "" {
			doc.Counts.Accepted++
		} else {
			doc.Counts.Rejected++
		}
	}
	w.Header().Set("Location", "/v1/batches/"+doc.BatchID)
	writeJSON(w, http.StatusOK, doc)
}

// itemHeader is the header of the request an item stands for: the
// batch's, with the item's schedule as the schedule headers a request
// sent alone would carry.
func itemHeader(batch http.Header, it batchItem) http.Header {
	h := batch.Clone()
	h.Del(HeaderDelay)
	h.Del(HeaderNotBefore)
	if len(it.Delay) > 0 && string(it.Delay) != "null" {
		h.Set(HeaderDelay, string(it.Delay))
	}
	if it.NotBefore != nil {
		var s string
		if err := json.Unmarshal(*it.NotBefore, &s); err != nil {
			s = string(*it.NotBefore) // refused by parseSchedule
		}
		h.Set(HeaderNotBefore, s)
	}
	return h
}

// refuseItem answers an item with the problem err, as a request sent
// alone with its key would have had it.
func (g *Gateway) refuseItem(r *http.Request, st *itemState, key string, err error) {
	if re, ok := errors.AsType[*problem.Error](err); ok {
		cp := *re
		cp.Key = key
		err = &cp
	}
	var rec bufferedResponse
	g.problems.Write(&rec, r, err)
	st.doc.Status, st.doc.Problem = rec.status, rec.body.Bytes()
}

// replayItem answers an item with the stored answer of the request that
// used its key first.
func replayItem(st *itemState, resp idempotency.Response) {
	st.doc.Status = resp.Status
	if resp.Status == http.StatusAccepted {
		st.doc.Job = resp.Body
		st.jobID = strings.TrimPrefix(resp.Header.Get("Location"), "/v1/jobs/")
		return
	}
	st.doc.Problem = resp.Body
}

// problemDetail is the detail of a problem document.
func problemDetail(doc json.RawMessage) string {
	var p struct {
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(doc, &p)
	return p.Detail
}

// bufferedResponse keeps what a handler writes.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header {
	if b.header == nil {
		b.header = http.Header{}
	}
	return b.header
}

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}
