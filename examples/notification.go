package examples

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/workers"
)

// notification.send sets a Redis dedup key before it calls the partner. The
// record in PostgreSQL decides, never the Redis key alone.
// Design: docs/design/example-jobs.md

// ErrNotificationConflict is returned, permanently, for a message id the
// partner gave that another notification already holds.
var ErrNotificationConflict = errors.New("notification conflict")

// notifier runs notification.send.
type notifier struct {
	db       DB
	redis    redis.UniversalClient
	window   time.Duration
	prefix   string
	onDedup  func(hit bool)
	messages *partner
	log      *slog.Logger
}

func newNotifier(b Business, messages *partner) notifier {
	return notifier{
		db:       b.DB,
		redis:    b.Redis,
		window:   b.DedupWindow,
		prefix:   b.DedupPrefix,
		onDedup:  b.OnDedup,
		messages: messages,
		log:      b.Logger.With("task", TaskNotificationSend),
	}
}

// dedupKey is the Redis key of a message's dedup window, scoped to its
// tenant; the braces keep it in one Redis Cluster slot per message.
func (n notifier) dedupKey(job workers.Job[NotificationSend]) string {
	return n.prefix + "dedup:{" + scopedKey(job) + "}"
}

// send sends the message once and returns the partner's message id.
func (n notifier) send(ctx context.Context, job workers.Job[NotificationSend]) (string, error) {
	p := job.Payload
	log := n.log.With("tenant", job.Tenant, "job_key", job.Key, "fencing_token", job.Token)
	fresh, err := n.redis.SetNX(ctx, n.dedupKey(job), strconv.FormatInt(job.Token, 10), n.window).Result()
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
		id, err := n.recorded(ctx, job)
		if err != nil {
			return "", err
		}
		if id != "" {
			log.InfoContext(ctx, "already sent: not sending again", "result_ref", id)
			return id, nil
		}
	}
	messageID, err := send(ctx, n.messages, job)
	if err != nil {
		return "", fmt.Errorf("notification %s: %w", job.Key, err)
	}
	id, err := recordEffect(ctx, n.db, log, job, messageID, effectRecord{
		entity: "notification",
		write: func(tx pgx.Tx) pgx.Row {
			return tx.QueryRow(ctx, `
INSERT INTO notifications (tenant, dedup_key, event_id, user_id, template, partner_message_id, job_key, fencing_token)
VALUES ($1, $2, $3, $4, $5, $6, $2, $7)
ON CONFLICT (tenant, dedup_key) DO NOTHING
RETURNING partner_message_id`, job.Tenant, job.Key, p.EventID, p.UserID, p.Template, messageID, job.Token)
		},
		first: func(tx pgx.Tx) pgx.Row {
			return tx.QueryRow(ctx, sentMessage, job.Tenant, job.Key)
		},
		conflict: ErrNotificationConflict,
	})
	if err != nil {
		return "", fmt.Errorf("notification %s: %w", job.Key, err)
	}
	return id, nil
}

func (n notifier) dedup(hit bool) {
	if n.onDedup != nil {
		n.onDedup(hit)
	}
}

// sentMessage reads the message id of a tenant's sent notification.
const sentMessage = `SELECT partner_message_id FROM notifications WHERE tenant = $1 AND dedup_key = $2`

// recorded returns the message id of a sent notification, "" if none.
func (n notifier) recorded(ctx context.Context, job workers.Job[NotificationSend]) (string, error) {
	var id string
	err := n.db.QueryRow(ctx, sentMessage, job.Tenant, job.Key).Scan(&id)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("notification %s: read the record: %w", job.Key, err)
	}
	return id, nil
}
