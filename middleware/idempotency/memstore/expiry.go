package memstore

import "time"

// The janitor's expiry queue. A scan of the map for expired records walks
// every live one while it holds the mutex that every request needs, so a
// janitor pass cost as much as the store held and stalled the requests of
// a full store. The queue is a min-heap of (time, record) entries, one per
// record, pushed when the record is created: DeleteExpired pops only what
// is due, so a pass costs what it deletes. A record's expiry moves after
// its entry was pushed (a completion, a renewed lease, a take-over). When
// it moves later the entry stays and is looked at again when it comes
// due: the record goes back into the queue under its new time. When it
// moves earlier (a retention shorter than the lease) a new entry is
// pushed and the old one, no longer the record's queuedAt, is dropped when
// it comes due. So a request usually pushes one entry, at the end of the
// heap (retention is mostly the same for every record). An entry whose
// record was replaced or deleted is dropped too. An entry holds one
// pointer and an int64, so the queue adds little for the garbage
// collector to walk.
type expiry struct {
	at int64 // when to look at r again, in Unix nanoseconds
	r  *record
}

// queueExpiry queues r under its current expiry. Callers hold mu.
func (s *Store) queueExpiry(r *record) {
	r.queuedAt = latest(r.ExpiresAt, r.LeaseUntil).UnixNano()
	s.pushExpiry(expiry{at: r.queuedAt, r: r})
}

// expiryMoved queues r again when its expiry moved before its entry's
// time; a later one is found when the entry comes due. Callers hold mu.
func (s *Store) expiryMoved(r *record) {
	if r.queuedAt != 0 && latest(r.ExpiresAt, r.LeaseUntil).UnixNano() < r.queuedAt {
		s.queueExpiry(r)
	}
}

func (s *Store) pushExpiry(e expiry) {
	s.queue = append(s.queue, e)
	q := s.queue
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if q[p].at <= q[i].at {
			break
		}
		q[p], q[i] = q[i], q[p]
		i = p
	}
}

// popExpiry removes the earliest entry. Callers hold mu and know the queue
// is not empty.
func (s *Store) popExpiry() expiry {
	q := s.queue
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = expiry{} // let the record go
	q = q[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(q) && q[l].at < q[small].at {
			small = l
		}
		if r := l + 1; r < len(q) && q[r].at < q[small].at {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	s.queue = q
	return top
}

// deleteDue deletes up to limit records whose expiry has passed, earliest
// queued first, and reports how many. Callers hold mu.
func (s *Store) deleteDue(now time.Time, limit int) int {
	n := 0
	due := now.UnixNano()
	for n < limit && len(s.queue) > 0 && s.queue[0].at <= due {
		e := s.popExpiry()
		r := e.r
		switch {
		case s.records[r.Scope] != r || r.queuedAt != e.at:
			// replaced or deleted since, or queued again earlier
		case !expired(r, now):
			s.queueExpiry(r) // its expiry or lease moved later
		default:
			s.remove(r.Scope)
			n++
		}
	}
	return n
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
