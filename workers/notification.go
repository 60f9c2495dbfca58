package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/enqueue"
	"github.com/idemgate/idemgate/workers/fence"
)

// notification.send shows a dedup window in front of a durable record. The
// message's dedup key is its business key, `email:{template}:{user_id}:
// {event_id}`; it is also the Idempotency-Key sent to the partner.
//
// The two stores answer different questions, and the order follows from
// what each can promise:
//
//   - Redis (`SET <prefix>dedup:{<key>} NX EX <window>`) is a filter that
//     says "certainly not tried within the window" or "maybe tried". An
//     attempt sets the key before it calls the partner, so a successful
//     SET NX means no attempt has reached Redis within the window, and the
//     attempt goes straight to the partner without reading PostgreSQL.
//   - PostgreSQL (`notifications`) is the truth: a row exists only once the
//     partner has accepted the message, written in a fenced transaction
//     after the call.
//
// A key already in Redis is therefore never a reason to skip by itself: the
// attempt that set it may have died before sending, or between sending and
// recording. On a hit the record decides: sent → return its message id
// without calling the partner; no record → send, with the same
// Idempotency-Key, so a partner that did get the earlier call answers with
// the first message instead of sending a second. Skipping on the Redis key
// alone would lose every message whose worker died after SET NX.
//
// When Redis is unreachable, or has lost the key (a restart, an eviction, a
// window shorter than a redelivery), the attempt falls back to what a hit
// does or goes straight to the partner. Either way the partner's
// deduplication by key is what stops a second message then, as it must in
// any case for the gap no local store can close: a worker that dies after
// the partner accepted the message and before the record commits.

// ErrNotificationConflict is returned, permanently, for a message id the
// partner gave that another notification already holds.
var ErrNotificationConflict = errors.New("notification conflict")

// notifier sends notifications.
type notifier struct {
	db       BusinessDB
	redis    redis.UniversalClient
	window   time.Duration
	prefix   string
	onDedup  func(hit bool)
	messages *partner
	log      *slog.Logger
}

func notificationHandler(deps Deps, b Business, messages *partner) asynq.Handler {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &notifier{
		db:       b.DB,
		redis:    b.Redis,
		window:   b.DedupWindow,
		prefix:   b.DedupPrefix,
		onDedup:  b.OnDedup,
		messages: messages,
		log:      log.With("task", enqueue.TaskNotificationSend),
	}
	return Handle(deps, enqueue.TaskNotificationSend,
		enqueue.NotificationSend.BusinessKey, enqueue.NotificationSend.Resource, n.send)
}

// dedupKey is the Redis key of a message's dedup window; the braces keep
// it in one Redis Cluster slot per message.
func (n *notifier) dedupKey(key string) string { return n.prefix + "dedup:{" + key + "}" }

// send sends the message once and returns the partner's message id.
func (n *notifier) send(ctx context.Context, job Job[enqueue.NotificationSend]) (string, error) {
	p := job.Payload
	if err := validPayload(p); err != nil {
		return "", err
	}
	key := job.Key
	log := n.log.With("job_key", key, "fencing_token", job.Token)
	fresh, err := n.redis.SetNX(ctx, n.dedupKey(key), strconv.FormatInt(job.Token, 10), n.window).Result()
	switch {
	case err != nil:
		// The filter is down; the record still tells.
		log.WarnContext(ctx, "dedup window unavailable: asking the record", "error", err)
	case fresh:
		log.DebugContext(ctx, "dedup miss", "dedup", "miss")
		n.dedup(false)
	default:
		log.DebugContext(ctx, "dedup hit: asking the record", "dedup", "hit")
		n.dedup(true)
	}
	if !fresh {
		id, err := n.recorded(ctx, key)
		if err != nil {
			return "", err
		}
		if id != "" {
			log.InfoContext(ctx, "already sent: not sending again", "result_ref", id)
			return id, nil
		}
	}
	body, err := json.Marshal(p)
	if err != nil {
		return "", Permanent(fmt.Errorf("notification %s: encode: %w", key, err))
	}
	id, err := n.messages.post(ctx, key, body)
	if err != nil {
		return "", fmt.Errorf("notification %s: %w", key, err)
	}
	return n.record(ctx, log, job, id)
}

func (n *notifier) dedup(hit bool) {
	if n.onDedup != nil {
		n.onDedup(hit)
	}
}

// recorded returns the message id of a sent notification, "" if none.
func (n *notifier) recorded(ctx context.Context, key string) (string, error) {
	var id string
	err := n.db.QueryRow(ctx, `SELECT partner_message_id FROM notifications WHERE dedup_key = $1`, key).Scan(&id)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("notification %s: read the record: %w", key, err)
	}
	return id, nil
}

// record writes that the partner accepted the message, fenced, and returns
// the message id recorded first.
func (n *notifier) record(ctx context.Context, log *slog.Logger, job Job[enqueue.NotificationSend], messageID string) (string, error) {
	p := job.Payload
	var recorded string
	err := pgx.BeginFunc(ctx, n.db, func(tx pgx.Tx) error {
		if err := fence.Check(ctx, tx, job.Resource, job.Token); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `
INSERT INTO notifications (dedup_key, event_id, user_id, template, partner_message_id, job_key, fencing_token)
VALUES ($1, $2, $3, $4, $5, $1, $6)
ON CONFLICT (dedup_key) DO NOTHING
RETURNING partner_message_id`, job.Key, p.EventID, p.UserID, p.Template, messageID, job.Token).Scan(&recorded)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "23505":
			return Permanent(fmt.Errorf("the partner's message %s belongs to another notification: %w", messageID, ErrNotificationConflict))
		case errors.Is(err, pgx.ErrNoRows):
			return tx.QueryRow(ctx, `SELECT partner_message_id FROM notifications WHERE dedup_key = $1`, job.Key).Scan(&recorded)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("notification %s: record message %s: %w", job.Key, messageID, err)
	}
	if recorded != messageID {
		// The partner answered one key with two messages: the user got
		// two. The record keeps the first; reconcile's partner check
		// reports the other.
		log.ErrorContext(ctx, "partner answered a repeated Idempotency-Key with another message",
			"recorded_message", recorded, "new_message", messageID)
	}
	return recorded, nil
}
