package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
)

// HeaderReplayed marks a 200 that answers a repeat with the first result.
const HeaderReplayed = "Idempotent-Replayed"

// Handler receives deliveries: it reads and verifies each with v, applies
// fn once per (tenant, key) with Apply on db, fenced per (tenant,
// resource(d)) (nil resource, or "", means the business key), and answers
// the sender:
//
//	200 {"result_ref": "..."}   applied now, or earlier (Idempotent-Replayed: true)
//	401                         missing or bad signature, timestamp outside the tolerance
//	400                         malformed envelope, headers that disagree with it (413: too large)
//	409 Idemgate-Stale: true    a newer fencing token has been applied to the resource
//	422                         fn returned an error made with Reject
//	500                         anything else; logged with slog's default logger
//
// Only POST is accepted.
func Handler(v *Verifier, db DB, resource func(Delivery) string,
	fn func(ctx context.Context, tx pgx.Tx, d Delivery) (string, error),
) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
			return
		}
		d, err := Read(r, v, 0)
		if err != nil {
			writeError(w, r, err)
			return
		}
		var res string
		if resource != nil {
			res = resource(d)
		}
		ref, replayed, err := Apply(r.Context(), db, d, res, func(ctx context.Context, tx pgx.Tx) (string, error) {
			return fn(ctx, tx, d)
		})
		if err != nil {
			writeError(w, r, err)
			return
		}
		if replayed {
			w.Header().Set(HeaderReplayed, "true")
		}
		writeJSON(w, http.StatusOK, map[string]string{"result_ref": ref})
	})
}

// writeError is the one place an error becomes a status. The body carries
// only what the sender may store and show; an unexpected cause is logged.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		tooLarge *http.MaxBytesError
		stale    *StaleError
		reject   *rejectError
	)
	status, msg := http.StatusInternalServerError, "internal error"
	switch {
	case errors.Is(err, ErrMissingHeaders), errors.Is(err, ErrTimestamp), errors.Is(err, ErrSignature):
		status, msg = http.StatusUnauthorized, err.Error()
	case errors.As(err, &tooLarge):
		status, msg = http.StatusRequestEntityTooLarge, err.Error()
	case errors.Is(err, ErrEnvelope):
		status, msg = http.StatusBadRequest, err.Error()
	case errors.As(err, &stale):
		w.Header().Set(HeaderStale, "true")
		status, msg = http.StatusConflict, stale.Error()
	case errors.As(err, &reject):
		status, msg = http.StatusUnprocessableEntity, reject.Error()
	default:
		slog.ErrorContext(r.Context(), "receiver: delivery failed", "err", err,
			"tenant", r.Header.Get(HeaderTenant), "key", r.Header.Get(HeaderIdempotencyKey))
	}
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
