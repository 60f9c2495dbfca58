package console

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/internal/explain"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

func scopeOfJob(s *explain.Story) idempotency.Scope {
	return idempotency.Scope{Tenant: s.Job.Tenant, Route: s.Job.Route, Key: s.Job.IdempotencyKey}
}

// keyStates are the states the key list filters by.
func keyStates() []idempotency.State {
	return []idempotency.State{idempotency.StateInFlight, idempotency.StateCompleted, idempotency.StateReleased, idempotency.StateUnknown}
}

// keysPage is the key lookup and the list of recent keys.
type keysPage struct {
	Tenant, Route, Key string
	State              idempotency.State
	States             []idempotency.State
	Routes             []string
	// Listed is set when a tenant and route were given and the store can
	// list; NoList says why it cannot.
	Listed bool
	NoList string
	Keys   []keyRow
	// All is set when the list pages through every key in key order
	// (from ?all=1) rather than showing the most recent ones; AllURL
	// starts that list and Next continues it ("" on the last page).
	All          bool
	AllURL, Next string
	// Unreadable says the store could not be read: the lookup form still
	// works once it can.
	Unreadable string
}

type keyRow struct {
	Record idempotency.Record
	URL    string
}

func (c *console) handleKeys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := keysPage{Tenant: q.Get("tenant"), Route: q.Get("route"), Key: q.Get("key"), State: idempotency.State(q.Get("state")),
		States: keyStates(), Routes: c.opts.Routes}
	if p.Tenant != "" && p.Route != "" && p.Key != "" {
		http.Redirect(w, r, c.keyURL(idempotency.Scope{Tenant: p.Tenant, Route: p.Route, Key: p.Key}), http.StatusSeeOther)
		return
	}
	if p.State != "" && !validState(p.State) {
		c.fail(w, r, http.StatusBadRequest, "Unknown key state "+string(p.State)+".")
		return
	}
	if p.Tenant != "" && p.Route != "" {
		c.listKeys(r, &p)
	}
	c.render(w, r, http.StatusOK, "keys", "Keys", page{Data: p, Flash: flashOf(r)})
}

// listKeys fills p's list: the most recent keys of its tenant and route,
// or with ?all=1 a page of every key in key order from ?after=. A store
// that cannot be read leaves the list empty with a note, not an error
// page: the lookup form above it stays usable.
func (c *console) listKeys(r *http.Request, p *keysPage) {
	q := r.URL.Query()
	recent, canRecent := c.opts.Keys.(RecentKeys)
	pages, canPage := c.opts.Keys.(KeyPages)
	if !canRecent && !canPage {
		p.NoList = "Listing keys needs store postgres or memory; store " + c.opts.StoreName + " keeps no index to list from. Look a key up by tenant, route and key."
		return
	}
	link := url.Values{"tenant": {p.Tenant}, "route": {p.Route}, "all": {"1"}}
	if p.State != "" {
		link.Set("state", string(p.State))
	}
	var (
		recs []idempotency.Record
		err  error
	)
	if canPage {
		p.AllURL = c.opts.Prefix + "/keys?" + link.Encode()
	}
	if canPage && (q.Get("all") != "" || !canRecent) {
		p.All = true
		var next string
		recs, next, err = pages.Keys(r.Context(), p.Tenant, p.Route, p.State, q.Get("after"), pageSize)
		if next != "" {
			link.Set("after", next)
			p.Next = c.opts.Prefix + "/keys?" + link.Encode()
		}
	} else {
		recs, err = recent.Recent(r.Context(), p.Tenant, p.Route, p.State, pageSize)
	}
	if err != nil {
		c.opts.Logger.WarnContext(r.Context(), "console: listing keys failed", "err", err)
		p.Unreadable = "The " + c.opts.StoreName + " store could not be read (listing keys): no key is listed. Reload in a moment."
		return
	}
	p.Listed = true
	for _, rec := range recs {
		p.Keys = append(p.Keys, keyRow{Record: rec, URL: c.keyURL(rec.Scope)})
	}
}

func validState(s idempotency.State) bool {
	for _, v := range keyStates() {
		if v == s {
			return true
		}
	}
	return false
}

// keyView is the key page.
type keyView struct {
	Scope   idempotency.Scope
	Story   *explain.Story
	Record  *idempotency.Record
	Headers []headerLine
	Body    bodyView
	JobURL  string
	Version string
	// Final: nothing on the page changes by itself any more.
	Final                 bool
	CanResolve, CanDelete bool
	// Unreadable says the story (PostgreSQL) could not be read: the page
	// shows the record from the idempotency store alone.
	Unreadable string
	// Requests are the last requests with the key at this instance, oldest
	// first; RequestsDropped counts the older ones not kept.
	Requests        []gateway.KeyRequest
	RequestsDropped int
	// Counts are every request the key received, at every instance, as
	// the store keeps them beside the record (idempotency.RequestCounter);
	// nil when there is no record or the store keeps none, which
	// CountsNote then says.
	Counts     *idempotency.KeyCount
	CountsNote string
}

// countRow is one line of the key page's request counts.
type countRow struct {
	Kind gateway.RecentKind
	N    int64
}

// CountRows are v's counts by kind, in the order of gateway.RecentKind.
func (v keyView) CountRows() []countRow {
	if v.Counts == nil {
		return nil
	}
	c := v.Counts
	return []countRow{
		{gateway.RecentNew, c.New}, {gateway.RecentReplayed, c.Replayed}, {gateway.RecentConflict, c.Conflict},
		{gateway.RecentMismatch, c.Mismatch}, {gateway.RecentReleased, c.Released},
	}
}

// CountsLag is how long the counts may lag the requests.
func (keyView) CountsLag() string { return gateway.KeyCountsInterval.String() }

// RequestsKept is how many requests an instance keeps per key.
func (keyView) RequestsKept() int { return gateway.KeyHistoryDepth }

// KeysKept is how many keys an instance keeps requests for.
func (keyView) KeysKept() int { return gateway.KeyHistoryKeys }

func scopeParam(r *http.Request) idempotency.Scope {
	return idempotency.Scope{Tenant: gateway.PathParam(r, "tenant"), Route: gateway.PathParam(r, "route"), Key: gateway.PathParam(r, "key")}
}

func (c *console) keyStory(r *http.Request, scope idempotency.Scope) (keyView, int, error) {
	v := keyView{Scope: scope}
	v.Requests, v.RequestsDropped = c.opts.KeyRequests.Requests(scope)
	story, storyErr := c.opts.Stories.Key(r.Context(), scope)
	switch {
	case errors.Is(storyErr, explain.ErrNotFound):
		return v, http.StatusNotFound, storyErr
	case storyErr != nil:
		// The claims and the job are in PostgreSQL; the record may be in
		// a store that still answers (Redis): show it alone.
		c.opts.Logger.WarnContext(r.Context(), "console: reading a key's story failed", "err", storyErr)
		story = &explain.Story{Verdict: "Unknown: PostgreSQL could not be read."}
		v.Unreadable = "PostgreSQL could not be read: the key's claims, its job and its verdict are not shown. The record below is the " + c.opts.StoreName + " store's. Reload in a moment."
	}
	v.Story = story
	rec, err := c.opts.Keys.Get(r.Context(), scope)
	switch {
	case errors.Is(err, idempotency.ErrNotFound) && storyErr != nil:
		return v, http.StatusServiceUnavailable, storyErr
	case errors.Is(err, idempotency.ErrNotFound):
	case err != nil:
		return v, http.StatusServiceUnavailable, err
	default:
		v.Record = &rec
		if rec.Response != nil {
			v.Headers = headerLines(rec.Response.Header)
			v.Body = viewBody(rec.Response.Body, rec.Response.BodyOmitted)
		}
		v.CanDelete = true
		v.CanResolve = rec.State == idempotency.StateUnknown
	}
	c.keyCounts(r, &v)
	if story.Job != nil {
		v.JobURL = c.jobURL(string(story.Job.Id))
	}
	v.Final = v.Record == nil || v.Record.State != idempotency.StateInFlight
	if story.Job != nil {
		v.Final = v.Final && job.Status(story.Job.Status).Final()
	}
	v.Version = version(struct {
		S *explain.Story
		R *idempotency.Record
	}{story, v.Record})
	return v, http.StatusOK, nil
}

// keyCounts fills v's request counts from the store, when it keeps them
// and v has a record. A store that cannot be read leaves a note, not an
// error page.
func (c *console) keyCounts(r *http.Request, v *keyView) {
	counter, ok := c.opts.Keys.(idempotency.RequestCounter)
	switch {
	case !ok:
		v.CountsNote = "Store " + c.opts.StoreName + " keeps no request counts."
		return
	case v.Record == nil:
		v.CountsNote = "No record: its counts went with it."
		return
	}
	counts, err := counter.RequestCounts(r.Context(), v.Scope)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		v.CountsNote = "No record: its counts went with it."
	case err != nil:
		c.opts.Logger.WarnContext(r.Context(), "console: reading a key's request counts failed", "err", err)
		v.CountsNote = "The " + c.opts.StoreName + " store could not be read (request counts). Reload in a moment."
	default:
		v.Counts = &counts
	}
}

func (c *console) handleKey(w http.ResponseWriter, r *http.Request) {
	scope := scopeParam(r)
	v, status, err := c.keyStory(r, scope)
	if err != nil {
		c.storyFailed(w, r, status, "idempotency key "+scope.Key+" of "+scope.Tenant+"/"+scope.Route, err)
		return
	}
	c.render(w, r, http.StatusOK, "key", "Key "+scope.Key, page{Data: v, Flash: flashOf(r), Live: c.keyURL(scope) + "/live", Version: v.Version})
}

func (c *console) handleKeyLive(w http.ResponseWriter, r *http.Request) {
	v, status, err := c.keyStory(r, scopeParam(r))
	if err != nil {
		writeLive(w, status, live{})
		return
	}
	state := ""
	if v.Record != nil {
		state = string(v.Record.State)
	}
	writeLive(w, http.StatusOK, live{Version: v.Version, Status: state, Final: v.Final})
}

// keyAction is one action on a key.
type keyAction struct {
	Name, Label, Explains string
	applies               func(keyView) bool
}

func keyActions() []keyAction {
	return []keyAction{
		{"resolve", "Resolve",
			"Resolve marks the key's unknown outcome as not processed: the record in the idempotency store goes from unknown to released, as POST /admin/keys/…/resolve does, and the next request with this key and the same body runs again, with a higher fencing token. Do it only once you know the first attempt had no effect.",
			func(v keyView) bool { return v.CanResolve }},
		{"delete", "Delete",
			"Delete removes the idempotency record from the store whatever its state, as DELETE /admin/keys/… does, and forgets it in this gateway's replay cache: the next request with this key runs as a new one. A job the key created, and the claim ledger, stay.",
			func(v keyView) bool { return v.CanDelete }},
	}
}

func findKeyAction(name string) (keyAction, bool) {
	for _, a := range keyActions() {
		if a.Name == name {
			return a, true
		}
	}
	return keyAction{}, false
}

func (c *console) handleKeyConfirm(w http.ResponseWriter, r *http.Request) {
	scope := scopeParam(r)
	a, ok := findKeyAction(gateway.PathParam(r, "action"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such action on a key.")
		return
	}
	what := "idempotency key " + scope.Key + " of " + scope.Tenant + "/" + scope.Route
	v, status, err := c.keyStory(r, scope)
	if err != nil {
		c.storyFailed(w, r, status, what, err)
		return
	}
	if !a.applies(v) {
		state := "gone"
		if v.Record != nil {
			state = string(v.Record.State)
		}
		c.fail(w, r, http.StatusConflict, a.Label+" does not apply to "+what+", whose record is "+state+".")
		return
	}
	c.render(w, r, http.StatusOK, "confirm", a.Label+" key "+scope.Key, page{Data: confirmView{
		Action: a.Name, Label: a.Label, Button: a.Label + " key", Explains: a.Explains, Subject: what, Back: c.keyURL(scope)}})
}

func (c *console) handleKeyAction(w http.ResponseWriter, r *http.Request) {
	scope := scopeParam(r)
	a, ok := findKeyAction(gateway.PathParam(r, "action"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such action on a key.")
		return
	}
	ctx := r.Context()
	reason, ok := c.reason(w, r)
	if !ok {
		return
	}
	log := c.opts.Logger.With("tenant", scope.Tenant, "route", scope.Route, "idempotency_key", scope.Key)
	switch a.Name {
	case "resolve":
		err := c.opts.Keys.Resolve(ctx, scope)
		switch {
		case errors.Is(err, idempotency.ErrNotFound):
			c.fail(w, r, http.StatusNotFound, "No idempotency record for this key.")
		case errors.Is(err, idempotency.ErrNotUnknown):
			c.fail(w, r, http.StatusConflict, "Only a record whose outcome is unknown can be resolved; delete it instead.")
		case err != nil:
			c.actionFailed(w, r, "resolve", err)
		default:
			log.InfoContext(ctx, "unknown outcome released by an operator from the console")
			c.record(r, job.Action{Action: "resolve-key", Tenant: scope.Tenant, Route: scope.Route, Key: scope.Key, Reason: reason})
			seeOther(w, r, c.keyURL(scope), "resolved")
		}
	case "delete":
		if _, err := c.opts.Keys.Get(ctx, scope); errors.Is(err, idempotency.ErrNotFound) {
			c.fail(w, r, http.StatusNotFound, "No idempotency record for this key.")
			return
		}
		if err := c.opts.Keys.Delete(ctx, scope); err != nil {
			c.actionFailed(w, r, "delete", err)
			return
		}
		if c.opts.Forget != nil {
			c.opts.Forget(scope)
		}
		log.InfoContext(ctx, "idempotency record deleted by an operator from the console")
		c.record(r, job.Action{Action: "delete-key", Tenant: scope.Tenant, Route: scope.Route, Key: scope.Key, Reason: reason})
		seeOther(w, r, c.opts.Prefix+"/keys?tenant="+url.QueryEscape(scope.Tenant)+"&route="+url.QueryEscape(scope.Route), "key-deleted")
	}
}
