package memstore

import "time"

// The janitor's expiry queue. A scan of the map for expired records walks
// every live one while it holds the mutex that every request needs, so a
// janitor pass cost as much as the store held and stalled the requests of
// a full store. The queue is a min-heap of (expiry, record) entries, one
// pushed whenever a record's expiry is set: DeleteExpired pops only what
// is due, so a pass costs what it deletes. An entry whose record has since
// been given a later expiry, replaced or deleted is stale and is dropped
// when it comes up (its record has a later entry of its own, or none is
// needed). An entry holds one pointer and an int64, so the queue adds
// little for the garbage collector to walk.
type expiry struct {
	at int64 // r.ExpiresAt when pushed, in Unix nanoseconds
	r  *record
}

// expireAt queues r under its current ExpiresAt. Callers hold mu.
func (s *Store) expireAt(r *record) { s.pushExpiry(expiry{at: r.ExpiresAt.UnixNano(), r: r}) }

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
// first, and reports how many. Callers hold mu.
func (s *Store) deleteDue(now time.Time, limit int) int {
	n := 0
	due := now.UnixNano()
	for n < limit && len(s.queue) > 0 && s.queue[0].at <= due {
		e := s.popExpiry()
		r := e.r
		if s.records[r.Scope] != r || r.ExpiresAt.UnixNano() > e.at {
			continue // replaced, deleted, or given a later expiry
		}
		if !expired(r, now) {
			// A lease outlives the expiry: look again when it ends.
			s.pushExpiry(expiry{at: r.LeaseUntil.UnixNano(), r: r})
			continue
		}
		s.remove(r.Scope)
		n++
	}
	return n
}
