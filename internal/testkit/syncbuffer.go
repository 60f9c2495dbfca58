package testkit

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that a process's or a goroutine's writes
// and the test's reads can share: a log sink to search while it fills.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
