package lincheck

import (
	"sync"
	"time"
)

// Operation is one call and what it returned. Call and Return are read
// from the monotonic clock (time.Now); an instantaneous event, such as an
// upstream applying a request on arrival, has Call equal to Return.
type Operation struct {
	// Client identifies the caller, for reading a history; the checker
	// does not rely on it.
	Client int
	// Key is the partition the operation belongs to: operations of
	// different keys never constrain each other.
	Key          string
	Input        any
	Output       any
	Call, Return time.Time
}

// Recorder collects operations from concurrent goroutines. The zero value
// is not usable; use NewRecorder.
type Recorder struct {
	mu  sync.Mutex
	ops []Operation
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Begin notes a call's time and returns the function that records the
// operation with its output once it returned. A call whose end is never
// recorded is left out of the history: what it did is not known, and a
// model treats an operation left out as one that may or may not have
// happened only if its effect shows elsewhere (an upstream application).
func (r *Recorder) Begin(client int, key string, input any) func(output any) {
	call := time.Now()
	return func(output any) {
		r.Add(Operation{Client: client, Key: key, Input: input, Output: output, Call: call, Return: time.Now()})
	}
}

// Add records a complete operation.
func (r *Recorder) Add(op Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Operations returns a copy of what was recorded, in recording order.
func (r *Recorder) Operations() []Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Operation(nil), r.ops...)
}

// Len is how many operations were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}
