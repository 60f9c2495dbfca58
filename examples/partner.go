package examples

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/workers"
)

// maxPartnerResponseBytes bounds what is read of a partner's answer.
const maxPartnerResponseBytes = 1 << 20

// PartnerError is a partner's answer other than 2xx. Status 408, 425, 429
// and 5xx say the partner is unavailable (it did not process the request,
// or may answer differently later) and are wrapped with
// workers.Unavailable; every other 4xx is a refusal retrying cannot
// change, and is wrapped with workers.Permanent.
type PartnerError struct {
	Endpoint string
	Status   int
	// Body is the start of the partner's answer, for the job's last_error.
	Body string
}

func (e *PartnerError) Error() string {
	return fmt.Sprintf("partner %s answered %d: %s", e.Endpoint, e.Status, e.Body)
}

// Transient reports whether the partner may accept the same request later.
func (e *PartnerError) Transient() bool {
	switch {
	case e.Status == http.StatusRequestTimeout, e.Status == http.StatusTooEarly, e.Status == http.StatusTooManyRequests:
		return true
	case e.Status >= 400 && e.Status < 500:
		return false
	}
	return true
}

// partner calls one endpoint of the partner API. Every call of one job
// carries the same Idempotency-Key and the same body, so however often it
// is sent the partner applies it once and answers every repeat with the
// first result.
type partner struct {
	endpoint string
	client   *http.Client
	timeout  time.Duration
	breaker  *breaker
}

func newPartner(endpoint string, b Business) *partner {
	return &partner{
		endpoint: endpoint,
		client:   b.HTTPClient,
		timeout:  b.PartnerTimeout,
		breaker:  newBreaker(b.Breaker, b.Now),
	}
}

// send posts the job's payload with the job's tenant-scoped business key
// as Idempotency-Key, and returns the id of the effect.
func send[T any](ctx context.Context, p *partner, job workers.Job[T]) (string, error) {
	body, err := json.Marshal(job.Payload)
	if err != nil {
		return "", workers.Permanent(fmt.Errorf("encode: %w", err))
	}
	return p.post(ctx, scopedKey(job), body)
}

// post sends body with the Idempotency-Key key and returns the "id" of the
// effect from the partner's JSON answer. Its error says the partner is
// unavailable (workers.Unavailable: down, overloaded, silent, or its
// circuit open), or that the partner refused the request for good
// (workers.Permanent); anything else is transient.
func (p *partner) post(ctx context.Context, key string, body []byte) (string, error) {
	done, err := p.breaker.allow()
	if err != nil {
		return "", workers.Unavailable(fmt.Errorf("partner %s: %w", p.endpoint, err))
	}
	id, outcome, err := p.do(ctx, key, body)
	done(outcome)
	return id, err
}

func (p *partner) do(job context.Context, key string, body []byte) (string, callOutcome, error) {
	ctx, cancel := context.WithTimeout(job, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return "", callIgnored, workers.Permanent(fmt.Errorf("partner %s: %w", p.endpoint, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := p.client.Do(req)
	if err != nil {
		if job.Err() != nil {
			// Our own job stopped (its lease was lost, a shutdown): that
			// says nothing about the partner's health.
			return "", callIgnored, fmt.Errorf("partner %s: %w", p.endpoint, err)
		}
		// A timeout or a dropped connection is ambiguous: the partner may
		// have applied the request. The retry sends the same key, so it
		// is safe to retry for as long as the partner stays unavailable.
		return "", callFailed, workers.Unavailable(fmt.Errorf("partner %s: %w", p.endpoint, err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxPartnerResponseBytes))
	if err != nil {
		if job.Err() != nil {
			return "", callIgnored, fmt.Errorf("partner %s: read answer: %w", p.endpoint, err)
		}
		return "", callFailed, workers.Unavailable(fmt.Errorf("partner %s: read answer: %w", p.endpoint, err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		perr := &PartnerError{Endpoint: p.endpoint, Status: resp.StatusCode, Body: clipBody(data)}
		if perr.Transient() {
			return "", callFailed, workers.Unavailable(perr)
		}
		// The partner is up and answering; it refuses this request.
		return "", callSucceeded, workers.Permanent(perr)
	}
	var answer struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(data, &answer); err != nil || answer.ID == "" {
		// A repeat of the same key gets the same answer, so retrying cannot
		// help; the effect may have happened, which the operator must see.
		return "", callSucceeded, workers.Permanent(fmt.Errorf("partner %s answered %d without an effect id: %s",
			p.endpoint, resp.StatusCode, clipBody(data)))
	}
	return answer.ID, callSucceeded, nil
}

// clipBody keeps the start of a partner's answer for an error message.
func clipBody(b []byte) string {
	const max = 256
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// effectRecord records the id of an effect the partner applied on the row
// of the entity it was applied for (a payment, a notification).
type effectRecord struct {
	// entity names the row's kind in errors: "payment".
	entity string
	// write records the effect id and returns it, or returns no row when
	// the entity had recorded one already.
	write func(tx pgx.Tx) pgx.Row
	// first reads the effect id the entity recorded first.
	first func(tx pgx.Tx) pgx.Row
	// conflict is what a unique violation means: the partner gave an id
	// another entity holds.
	conflict error
}

// recordEffect runs r in the job's fenced transaction and returns the
// effect id the entity holds: effect, or the one recorded first.
func recordEffect[T any](ctx context.Context, db DB, log *slog.Logger, job workers.Job[T], effect string, r effectRecord) (string, error) {
	var recorded string
	err := fenced(ctx, db, job, func(tx pgx.Tx) error {
		err := r.write(tx).Scan(&recorded)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "23505":
			return workers.Permanent(fmt.Errorf("the partner's %s is recorded for another %s: %w", effect, r.entity, r.conflict))
		case errors.Is(err, pgx.ErrNoRows):
			// Recorded already, and not by a newer owner (the fence):
			// keep the effect recorded first.
			return r.first(tx).Scan(&recorded)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("record %s: %w", effect, err)
	}
	if recorded != effect {
		// The partner answered one key with two effects: it did not honour
		// Idempotency-Key. The entity keeps its first; reconcile's partner
		// check reports the other.
		log.ErrorContext(ctx, "partner answered a repeated Idempotency-Key with another effect",
			"tenant", job.Tenant, "job_key", job.Key, "idempotency_key", scopedKey(job),
			"recorded_effect", recorded, "new_effect", effect)
	}
	return recorded, nil
}
