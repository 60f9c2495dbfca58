package job

import (
	"context"
	"fmt"
	"strings"
)

// CountByStatusUpTo counts the jobs in each status (as a Record reads it:
// a scheduled job that is due counts as queued), each up to limit: a
// count of limit means "limit or more". Each status is a range of the
// jobs_status index read no further than limit rows, so the answer costs
// the same at a thousand jobs and at millions, where a GROUP BY would
// read the whole table.
func (s *Store) CountByStatusUpTo(ctx context.Context, limit int64) (map[Status]int64, error) {
	upTo := func(where string) string {
		return `(SELECT count(*) FROM (SELECT 1 FROM jobs WHERE ` + where + ` LIMIT $1) x)`
	}
	var parts []string
	for _, st := range Statuses() {
		var n string
		switch st {
		case StatusQueued:
			n = `LEAST(` + upTo(`status = 'queued'`) + ` + ` + upTo(`status = 'scheduled' AND not_before <= now()`) + `, $1)`
		case StatusScheduled:
			n = upTo(`status = 'scheduled' AND (not_before IS NULL OR not_before > now())`)
		default:
			n = upTo(`status = '` + string(st) + `'`)
		}
		parts = append(parts, `SELECT '`+string(st)+`'::text, `+n)
	}
	rows, err := s.db.Query(ctx, strings.Join(parts, "\nUNION ALL\n"), limit)
	if err != nil {
		return nil, fmt.Errorf("job: count jobs: %w", err)
	}
	defer rows.Close()
	out := map[Status]int64{}
	for rows.Next() {
		var st Status
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("job: count jobs: %w", err)
		}
		out[st] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job: count jobs: %w", err)
	}
	return out, nil
}
