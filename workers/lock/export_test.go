package lock

// Queued is how many of l's commands wait for a round trip.
func Queued(l *Locker) int {
	l.pipe.mu.Lock()
	defer l.pipe.mu.Unlock()
	return len(l.pipe.queue)
}
