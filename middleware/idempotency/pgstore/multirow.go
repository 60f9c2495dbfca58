package pgstore

import (
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Multi-row statements. A batch of claims (or of completions) was one
// statement per request in one round trip; PostgreSQL still parsed, bound,
// planned and started an executor for each, and pgx encoded and decoded
// each as a message of its own. Now the claims of a batch are one
// statement over a VALUES list, one row per request, and so are its
// completions; each result row carries its request's ordinal, which hands
// it to its caller. What each row does, and under which conditions, is
// exactly the single-row statement's; a caller that must run again on its
// own (batchError) runs the single-row statement.
//
// Two requests for one record never share a statement: an upsert or an
// update cannot change a row twice in one statement, and the second must
// see the first's write. The second goes out as a single-row statement
// after the first, in the same batch.
//
// Lock order. A batch's statements were sorted by primary key so that two
// batches lock rows in one order and never wait for each other in a cycle.
// Within a multi-row statement, rows are locked in the VALUES order, which
// is that order; across the batch, the claims now lock before the
// completions. Two batches could then wait in a cycle only if a record one
// batch claims is completed by the other while the reverse holds for a
// second record: a claim locks an existing record only to take it over,
// after its lease ran out, while its old owner completes it. PostgreSQL
// detects such a deadlock, aborts one batch, and its statements run again
// each on its own.

// manyRows is a statement that runs for any number of rows, and the
// single-row statement it stands in for.
type manyRows struct {
	// casts are the SQL types of one row's arguments, in the single-row
	// statement's argument order; each row's VALUES tuple is the row's
	// ordinal followed by these.
	casts []string
	// text is the statement around its VALUES list.
	text func(values string) string

	mu    sync.Mutex
	cache map[int]string // by row count
}

// sql returns the statement for n rows.
func (m *manyRows) sql(n int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.cache[n]; ok {
		return s
	}
	var b strings.Builder
	arg := 1
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(")
		b.WriteString(strconv.Itoa(i + 1))
		for _, cast := range m.casts {
			b.WriteString(", $")
			b.WriteString(strconv.Itoa(arg))
			b.WriteString("::")
			b.WriteString(cast)
			arg++
		}
		b.WriteString(")")
	}
	s := m.text(b.String())
	if m.cache == nil {
		m.cache = make(map[int]string)
	}
	m.cache[n] = s
	return s
}

// statement is one statement of a batch: a single op's, or a multi-row
// statement carrying several ops.
type statement struct {
	ops  []int     // indexes into the batch's ops
	many *manyRows // nil: the single op's own statement
}

// plan turns a batch's ops, sorted by lock order, into its statements: the
// ops that share a multi-row statement go together, at the place of the
// first of them, unless their record is already in it.
func plan(ops []*op) []statement {
	var (
		stmts []statement
		at    = map[*manyRows]int{} // the open multi-row statement of each kind
	)
	for i, o := range ops {
		if o.many == nil {
			stmts = append(stmts, statement{ops: []int{i}})
			continue
		}
		j, ok := at[o.many]
		if ok && ops[stmts[j].ops[len(stmts[j].ops)-1]].order == o.order {
			// Its record is in the statement already (sorted, so the
			// last one): it goes alone, after it.
			stmts = append(stmts, statement{ops: []int{i}})
			continue
		}
		if !ok {
			at[o.many] = len(stmts)
			stmts = append(stmts, statement{ops: []int{i}, many: o.many})
			continue
		}
		stmts[j].ops = append(stmts[j].ops, i)
	}
	for i := range stmts {
		if len(stmts[i].ops) == 1 {
			stmts[i].many = nil // one row: the single-row statement
		}
	}
	return stmts
}

// queue adds st to batch.
func (st statement) queue(batch *pgx.Batch, ops []*op) {
	if st.many == nil {
		o := ops[st.ops[0]]
		batch.Queue(o.sql, o.args...)
		return
	}
	args := make([]any, 0, len(st.ops)*len(st.many.casts))
	for _, i := range st.ops {
		args = append(args, ops[i].args...)
	}
	batch.Queue(st.many.sql(len(st.ops)), args...)
}

// read reads st's results into results. A single-row statement's op reads
// its row (or its command tag) as it always has. A multi-row statement's
// rows each start with the ordinal of the op they answer; an op that gets
// no row gets what its single-row statement would have given: pgx.ErrNoRows
// for a query, a tag of 0 rows for an exec.
func (st statement) read(br pgx.BatchResults, typeMap *pgtype.Map, ops []*op, results []error) {
	if st.many == nil {
		i := st.ops[0]
		o := ops[i]
		if o.scan != nil {
			results[i] = o.scan(br.QueryRow())
		} else {
			o.tag, results[i] = br.Exec()
		}
		return
	}
	answered := make([]bool, len(st.ops))
	rows, err := br.Query()
	if err == nil {
		for rows.Next() {
			fields, values := rows.FieldDescriptions(), rows.RawValues()
			var n int32
			if err = pgx.ScanRow(typeMap, fields[:1], values[:1], &n); err != nil {
				break
			}
			if n < 1 || int(n) > len(st.ops) || answered[n-1] {
				err = &pgconn.PgError{Severity: "ERROR", Message: "pgstore: multi-row statement returned row " + strconv.Itoa(int(n))}
				break
			}
			answered[n-1] = true
			i := st.ops[n-1]
			if o := ops[i]; o.scan != nil {
				results[i] = o.scan(restOfRow{typeMap, fields[1:], values[1:]})
			} else {
				o.tag = pgconn.NewCommandTag("SELECT 1")
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	for k, i := range st.ops {
		switch o := ops[i]; {
		case err != nil:
			results[i] = err
		case answered[k]:
		case o.scan != nil:
			results[i] = o.scan(noRow{})
		default:
			o.tag = pgconn.NewCommandTag("SELECT 0")
		}
	}
}

// restOfRow is a multi-row statement's result row after its ordinal, read
// as the single-row statement's row.
type restOfRow struct {
	typeMap *pgtype.Map
	fields  []pgconn.FieldDescription
	values  [][]byte
}

func (r restOfRow) Scan(dest ...any) error {
	return pgx.ScanRow(r.typeMap, r.fields, r.values, dest...)
}

// noRow is the row of an op its multi-row statement returned nothing for.
type noRow struct{}

func (noRow) Scan(...any) error { return pgx.ErrNoRows }

// claimCasts are the types of claimSQL's arguments: tenant, route, key,
// fingerprint, owner, lease, retention, instance.
var claimCasts = []string{"text", "text", "text", "text", "text", "interval", "interval", "text"}

// claimManySQL is claimSQL for the rows of values (see claimSQL for what
// each part does and why). The records are distinct, so each row's cur,
// ins and ledger rows are found by its primary key.
func claimManySQL(values string) string {
	return `
WITH v (i, tenant, route, key, fp, owner, lease, retention, instance) AS (VALUES ` + values + `),
cur AS (
	SELECT v.i, r.tenant, r.route, r.key, r.fingerprint, r.state, r.fencing_token, r.owner, r.lease_until,
		r.response_status, r.response_headers, r.response_body, r.body_omitted, r.created_at, r.updated_at, r.expires_at,
		(r.state <> 'in_flight' OR r.lease_until <= now())
		AND (r.expires_at <= now() OR (r.fingerprint = v.fp AND r.state IN ('released', 'in_flight'))) AS claimable
	FROM v JOIN idempotency_records r ON r.tenant = v.tenant AND r.route = v.route AND r.key = v.key
), ins AS (
	INSERT INTO idempotency_records AS r
		(tenant, route, key, fingerprint, state, owner, fencing_token, lease_until, expires_at)
	SELECT v.tenant, v.route, v.key, v.fp, 'in_flight', v.owner, 1, now() + v.lease, now() + greatest(v.lease, v.retention)
	FROM v
	WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.i = v.i AND NOT cur.claimable)
	ORDER BY v.i
` + claimUpsert + `
), taken AS (
	UPDATE idempotency_claims c SET outcome = 'taken_over', ended_at = now()
	FROM ins
	WHERE c.tenant = ins.tenant AND c.route = ins.route AND c.key = ins.key AND c.outcome IS NULL
), ledger AS (
	INSERT INTO idempotency_claims (tenant, route, key, fencing_token, owner, instance)
	SELECT ins.tenant, ins.route, ins.key, ins.fencing_token, ins.owner, v.instance
	FROM ins JOIN v ON v.tenant = ins.tenant AND v.route = ins.route AND v.key = ins.key
	ORDER BY v.i
)
SELECT v.i, true, false, ins.fingerprint, 'in_flight', ins.fencing_token, ins.owner, ins.lease_until,
	0, NULL::jsonb, NULL::bytea, false, ins.created_at, ins.updated_at, ins.expires_at
FROM ins JOIN v ON v.tenant = ins.tenant AND v.route = ins.route AND v.key = ins.key
UNION ALL
SELECT cur.i, false, coalesce(cur.claimable, false), cur.fingerprint, cur.state, cur.fencing_token, cur.owner, cur.lease_until,
	coalesce(cur.response_status, 0), cur.response_headers, cur.response_body, cur.body_omitted, cur.created_at, cur.updated_at, cur.expires_at
FROM cur
WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.tenant = cur.tenant AND ins.route = cur.route AND ins.key = cur.key)`
}

// completeCasts are the types of completeSQL's arguments: tenant, route,
// key, owner, status, headers, body, omitted, retention, rerun, channel,
// scope id.
var completeCasts = []string{"text", "text", "text", "text", "integer", "jsonb", "bytea", "boolean", "interval", "boolean", "text", "text"}

// completeManySQL is completeSQL for the rows of values: one result row per
// record completed.
func completeManySQL(values string) string {
	return `
WITH v (i, tenant, route, key, owner, status, headers, body, omitted, retention, rerun, channel, id) AS (VALUES ` + values + `),
done AS (
	UPDATE idempotency_records r
	SET state            = 'completed',
	    lease_until      = NULL,
	    response_status  = v.status,
	    response_headers = v.headers,
	    response_body    = v.body,
	    body_omitted     = v.omitted,
	    updated_at       = now(),
	    expires_at       = now() + v.retention
	FROM v
	WHERE r.tenant = v.tenant AND r.route = v.route AND r.key = v.key AND r.owner = v.owner
	  AND (r.state = 'in_flight' OR (v.rerun AND r.state = 'completed'))
	RETURNING v.i, r.watched, v.tenant, v.route, v.key, v.owner, v.status, v.channel, v.id
), ledger AS (
	UPDATE idempotency_claims c SET outcome = 'completed', ended_at = now(), status = done.status
	FROM done
	WHERE c.tenant = done.tenant AND c.route = done.route AND c.key = done.key AND c.owner = done.owner
	  AND c.outcome IS NULL
)
SELECT i, CASE WHEN watched THEN pg_notify(channel, id) END FROM done`
}
