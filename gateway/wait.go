package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
	"github.com/idemgate/idemgate/problem"
)

// DefaultMaxWait is the longest GET /v1/jobs/{id}?wait= holds unless
// Options.MaxWait says otherwise.
const DefaultMaxWait = 30 * time.Second

// JobWatcher tells a waiting GET /v1/jobs/{id} when its job's document
// changes: a *job.Watcher is one. Each watch is read once per change for
// all the watches of its job, never once per caller.
type JobWatcher interface {
	Watch(ctx context.Context, id string) *job.Watch
}

// jobWait is what a GET /v1/jobs/{id} asks to wait for.
type jobWait struct {
	// d is how long to hold, clamped to Options.MaxWait; 0 answers at once.
	d time.Duration
	// ifNoneMatch are the entity tags of If-None-Match, their W/ dropped
	// (the comparison is weak, RFC 9110 13.1.2); any is "*".
	ifNoneMatch []string
	any         bool
}

// conditional reports whether the request has an If-None-Match.
func (jw jobWait) conditional() bool { return jw.any || len(jw.ifNoneMatch) > 0 }

// matches reports whether etag is one the client already has.
func (jw jobWait) matches(etag string) bool {
	if jw.any {
		return true
	}
	for _, t := range jw.ifNoneMatch {
		if t == etag {
			return true
		}
	}
	return false
}

// done reports whether the wait is over for a job whose document is doc:
// it changed from every version the client has, or, without
// If-None-Match, it is final; a final document that the client has will
// not change either.
func (jw jobWait) done(doc openapi.Job) bool {
	final := job.Status(doc.Status).Final()
	if jw.conditional() {
		return final || !jw.matches(jobETag(doc))
	}
	return final
}

// parseJobWait reads ?wait= (whole seconds, a non-negative integer; a
// longer wait than max is clamped, not refused) and If-None-Match.
func parseJobWait(r *http.Request, max time.Duration) (jobWait, error) {
	var jw jobWait
	if vs, ok := r.URL.Query()["wait"]; ok {
		if len(vs) != 1 {
			return jw, &problem.Error{Err: ErrBadRequest, Detail: "wait is given more than once"}
		}
		v := vs[0]
		if v == "" || strings.TrimLeft(v, "0123456789") != "" {
			return jw, &problem.Error{Err: ErrBadRequest, Detail: fmt.Sprintf("wait must be a non-negative whole number of seconds, not %q", v)}
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > int64(max/time.Second) {
			jw.d = max // digits beyond any sensible wait: clamped too
		} else {
			jw.d = time.Duration(n) * time.Second
		}
	}
	for _, field := range r.Header.Values("If-None-Match") {
		for t := range strings.SplitSeq(field, ",") {
			t = strings.TrimSpace(t)
			if t == "*" {
				jw.any = true
			} else if t = strings.TrimPrefix(t, "W/"); t != "" {
				jw.ifNoneMatch = append(jw.ifNoneMatch, t)
			}
		}
	}
	return jw, nil
}

// jobETag is the strong entity tag of a job document: a digest of its
// content, times in UTC, so that every gateway gives the same document the
// same tag whatever its time zone.
func jobETag(doc openapi.Job) string {
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	doc.CreatedAt, doc.UpdatedAt = doc.CreatedAt.UTC(), doc.UpdatedAt.UTC()
	doc.NotBefore, doc.CancelRequestedAt, doc.FinishedAt = utc(doc.NotBefore), utc(doc.CancelRequestedAt), utc(doc.FinishedAt)
	b, _ := json.Marshal(doc) // a struct of strings, numbers and times: cannot fail
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// watchJob starts watching job id when the request waits, before the
// handler reads the job, so that no change between that read and the wait
// goes unseen. Nil (whose Stop does nothing) when there is nothing to
// watch with or for.
func (g *Gateway) watchJob(ctx context.Context, id string, jw jobWait) *job.Watch {
	if jw.d <= 0 || g.opts.JobWatcher == nil || g.Draining() {
		return nil
	}
	return g.opts.JobWatcher.Watch(ctx, id)
}

// awaitJob holds a GET /v1/jobs/{id} until jw is done with the job, its
// wait ends, the client goes away or the gateway starts draining, and
// returns the document to answer with: the job as last read. rec is the
// job as the handler read it, for the caller's tenant, after watch began;
// the watch's reads are by id, which names one tenant's job.
func (g *Gateway) awaitJob(r *http.Request, rec job.Row, jw jobWait, watch *job.Watch) openapi.Job {
	doc := jobDocument(rec)
	if watch == nil || jw.done(doc) {
		return doc
	}
	watch.Seen(rec)
	// Held, the request waits on a watch, not on work: its slot of
	// max_in_flight goes back while it does (admitWait bounds the waits).
	defer g.idle()()
	timer := time.NewTimer(jw.d)
	defer timer.Stop()
	for {
		select {
		case <-watch.Changed():
			// A read that began before the handler's may come after it:
			// never go back to an older document.
			if latest, ok := watch.Latest(); ok && !latest.UpdatedAt.Before(rec.UpdatedAt) {
				rec, doc = latest, jobDocument(latest)
				if jw.done(doc) {
					return doc
				}
			}
		case <-timer.C:
			return doc
		case <-g.drained:
			// Shutting down: the current document now, not a cut
			// connection at the end of the shutdown timeout.
			return doc
		case <-r.Context().Done():
			return doc
		}
	}
}

// writeJob answers a GET /v1/jobs/{id} with doc and its ETag: 304 Not
// Modified, without a body, when the client already has it.
func (g *Gateway) writeJob(w http.ResponseWriter, doc openapi.Job, jw jobWait) {
	etag := jobETag(doc)
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-store")
	if jw.conditional() && jw.matches(etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeJSON(w, http.StatusOK, doc)
}
