package flowlimit

import (
	"sync"
)

// waiters are the takes of this process waiting for a slot, by the slots
// key of their budget, oldest first.
var waiters = struct {
	sync.Mutex
	by map[string][]*Watch
}{by: map[string][]*Watch{}}

// Watch is a take's place in this process's line for the slots of one
// budget. A release here signals the oldest watch not yet signalled, so
// a freed slot is taken at once; a release in another process is seen by
// the first in line, which is the one that looks at Redis.
type Watch struct {
	key string
	c   chan struct{}
}

// Watch puts a take at the end of the line for a slot of the budget
// name/value. Join before the first Take that may be refused, so that no
// release between the refusal and the wait is missed, and Stop once the
// take is done or given up.
func (l *Limiter) Watch(name, value string) *Watch {
	slots, _ := l.keys(name, ShortValue(value))
	w := &Watch{key: slots, c: make(chan struct{}, 1)}
	waiters.Lock()
	waiters.by[slots] = append(waiters.by[slots], w)
	waiters.Unlock()
	return w
}

// C receives when a slot of the budget was freed for this watch, or when
// it became first in line.
func (w *Watch) C() <-chan struct{} { return w.c }

// First reports whether no older take of this process waits for the
// budget: the first in line looks at Redis for slots other processes
// free; the others wait for their signal.
func (w *Watch) First() bool {
	waiters.Lock()
	defer waiters.Unlock()
	line := waiters.by[w.key]
	return len(line) > 0 && line[0] == w
}

// Stop leaves the line. A signal the watch had not taken passes to the
// next in line, and a new first in line is signalled to look at Redis.
func (w *Watch) Stop() {
	waiters.Lock()
	defer waiters.Unlock()
	line := waiters.by[w.key]
	at := -1
	for i, o := range line {
		if o == w {
			at = i
			break
		}
	}
	if at < 0 {
		return
	}
	line = append(line[:at], line[at+1:]...)
	if len(line) == 0 {
		delete(waiters.by, w.key)
	} else {
		waiters.by[w.key] = line
	}
	pending := false
	select {
	case <-w.c:
		pending = true
	default:
	}
	if pending || at == 0 {
		signal(line)
	}
}

// signal signals the oldest watch of line not already signalled.
func signal(line []*Watch) {
	for _, o := range line {
		select {
		case o.c <- struct{}{}:
			return
		default:
		}
	}
}

// wake hands one freed slot of the budget whose slots key is key to the
// oldest watch not already signalled.
func wake(key string) {
	waiters.Lock()
	defer waiters.Unlock()
	signal(waiters.by[key])
}

// Freed tells the takes of this process waiting for the hold's slots
// that they are free: one waiter per slot. Release calls it; after
// ReleaseIn, call it once the pipeline has run.
func (h *Hold) Freed() {
	for _, s := range h.slots {
		wake(s)
	}
}
