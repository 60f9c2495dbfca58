package job

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// ScheduleRow is a schedule as the operators' list shows it.
type ScheduleRow struct {
	Recurring
	// LastFire is the latest fired slot; nil when none fired.
	LastFire *Slot
}

// ScheduleCursor is where a page of Schedules.Page ends: the tenant and
// id of its last schedule. It is opaque to clients: base64url of
// "<tenant> NUL <id>".
type ScheduleCursor string

func scheduleCursorOf(r Recurring) ScheduleCursor {
	return ScheduleCursor(base64.RawURLEncoding.EncodeToString([]byte(r.Tenant + "\x00" + r.ID)))
}

func (c ScheduleCursor) parse() (tenant, id string, err error) {
	raw, derr := base64.RawURLEncoding.DecodeString(string(c))
	tenant, id, ok := strings.Cut(string(raw), "\x00")
	if derr != nil || !ok || !Storable(tenant) || !Storable(id) {
		return "", "", fmt.Errorf("%w: %q", ErrBadCursor, string(c))
	}
	return tenant, id, nil
}

// Page returns at most limit schedules of every tenant, or of tenant
// when it is not "", in (tenant, id) order after the cursor after ("" is
// the first page), each with its last fire, and the cursor of the next
// page ("" on the last). Each page is one range of the schedules'
// primary key and one backward read of each schedule's slots.
func (s *Schedules) Page(ctx context.Context, tenant string, after ScheduleCursor, limit int) ([]ScheduleRow, ScheduleCursor, error) {
	if limit <= 0 {
		limit = 50
	}
	if !Storable(tenant) {
		return nil, "", nil
	}
	afterTenant, afterID := "", ""
	if after != "" {
		var err error
		if afterTenant, afterID, err = after.parse(); err != nil {
			return nil, "", err
		}
	}
	// One statement per filter, so that the planner sees the range of
	// the primary key each reads.
	q, args := `SELECT `+recurringColumns+` FROM schedules WHERE (tenant, id) > ($1, $2)`, []any{afterTenant, afterID, limit + 1}
	if tenant != "" {
		q, args = q+` AND tenant = $4`, append(args, tenant)
	}
	rs, err := s.query(ctx, q+` ORDER BY tenant, id LIMIT $3`, args...)
	if err != nil {
		return nil, "", err
	}
	var next ScheduleCursor
	if len(rs) > limit {
		rs = rs[:limit]
		next = scheduleCursorOf(rs[limit-1])
	}
	out := make([]ScheduleRow, len(rs))
	tenants, ids := make([]string, len(rs)), make([]string, len(rs))
	for i, r := range rs {
		out[i].Recurring = r
		tenants[i], ids[i] = r.Tenant, r.ID
	}
	if len(rs) == 0 {
		return out, next, nil
	}
	rows, err := s.db.Query(ctx, `
SELECT k.n, l.slot, COALESCE(l.job_id, ''), COALESCE(j.status, ''), j.not_before, l.recorded_at
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY k(tenant, id, n)
 CROSS JOIN LATERAL (
       SELECT s.slot, s.job_id, s.recorded_at FROM schedule_slots s
        WHERE s.tenant = k.tenant AND s.schedule_id = k.id AND s.outcome = 'fired'
        ORDER BY s.slot DESC LIMIT 1) l
  LEFT JOIN jobs j ON j.id = l.job_id AND j.tenant = k.tenant`, tenants, ids)
	if err != nil {
		return nil, "", fmt.Errorf("job: list schedules: last fires: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n int
		sl := Slot{Outcome: SlotFired}
		if err := rows.Scan(&n, &sl.Slot, &sl.JobID, &sl.Status, &sl.NotBefore, &sl.RecordedAt); err != nil {
			return nil, "", fmt.Errorf("job: list schedules: last fires: %w", err)
		}
		out[n-1].LastFire = &sl
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("job: list schedules: last fires: %w", err)
	}
	return out, next, nil
}

// Upcoming is the next n slots of r seen at now: from its next_fire_at,
// or, when the scheduler has not handled that slot yet, those after now.
func (r Recurring) Upcoming(now time.Time, n int) []time.Time {
	if n <= 0 {
		return nil
	}
	if r.NextFireAt.Before(now) {
		return r.Timing.NextN(now.Add(-time.Nanosecond), n)
	}
	return append([]time.Time{r.NextFireAt}, r.Timing.NextN(r.NextFireAt, n-1)...)
}
