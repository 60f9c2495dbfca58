package partnersim

import (
	"bytes"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Options shape the partner's behaviour.
type Options struct {
	// Latency is added to every answer.
	Latency time.Duration
	// FailRate is the chance of answering 503 before applying anything.
	FailRate float64
	// DropRate is the chance of applying the effect and then dropping the
	// connection without an answer.
	DropRate float64
	// Rand returns a float in [0,1); default math/rand/v2.Float64.
	Rand func() float64
}

// Stats counts requests: applied effects and replayed keys.
type Stats struct {
	Requests int64 `json:"requests"`
	Applied  int64 `json:"applied"`
	Replayed int64 `json:"replayed"`
}

type result struct {
	status      int
	body        []byte
	fingerprint string
}

// Sim is the partner. It is safe for concurrent use.
type Sim struct {
	opts Options
	mux  *http.ServeMux

	mu      sync.Mutex
	results map[string]result // by kind + Idempotency-Key
	stats   Stats
	applied map[string]int // effect id -> times applied
}

// New returns a partner with no records.
func New(opts Options) *Sim {
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	s := &Sim{opts: opts, mux: http.NewServeMux(), results: map[string]result{}, applied: map[string]int{}}
	s.mux.Handle("POST /charges", s.effect("charge", "ch_"))
	s.mux.Handle("POST /v1/payments", s.effect("charge", "ch_"))
	s.mux.Handle("POST /messages", s.effect("message", "msg_"))
	s.mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Stats())
	})
	s.mux.HandleFunc("GET /effects", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Applied())
	})
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return s
}

func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Stats returns the counters so far.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Applied returns how many times each effect (by its id) was applied: with
// an honest partner and safe clients, every value is 1.
func (s *Sim) Applied() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.applied))
	for k, v := range s.applied {
		out[k] = v
	}
	return out
}

func (s *Sim) effect(kind, prefix string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if s.opts.Latency > 0 {
			select {
			case <-time.After(s.opts.Latency):
			case <-r.Context().Done():
				return
			}
		}
		key := r.Header.Get("Idempotency-Key")
		s.mu.Lock()
		s.stats.Requests++
		s.mu.Unlock()
		if key == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "Idempotency-Key required"})
			return
		}
		if s.opts.FailRate > 0 && s.opts.Rand() < s.opts.FailRate {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "temporarily unavailable"})
			return
		}
		fp := hex.EncodeToString(bytes.TrimSpace(body))
		id := kind + "\x00" + key

		s.mu.Lock()
		prev, seen := s.results[id]
		if seen {
			s.stats.Replayed++
			s.mu.Unlock()
			if prev.fingerprint != fp {
				writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "Idempotency-Key reused with another body"})
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(prev.status)
			_, _ = w.Write(prev.body)
			return
		}
		effectID := prefix + newID()
		resp, _ := json.Marshal(map[string]any{
			"id": effectID, "object": kind, "idempotency_key": key,
			"fencing_token": r.Header.Get("Idempotency-Fencing-Token"), "request": json.RawMessage(validOrNull(body)),
		})
		s.results[id] = result{status: http.StatusCreated, body: resp, fingerprint: fp}
		s.applied[effectID]++
		s.stats.Applied++
		s.mu.Unlock()

		if s.opts.DropRate > 0 && s.opts.Rand() < s.opts.DropRate {
			// Applied, but the caller never hears of it.
			panic(http.ErrAbortHandler)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/"+kind+"s/"+effectID)
		w.Header().Set("Content-Length", strconv.Itoa(len(resp)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(resp)
	})
}

func validOrNull(b []byte) []byte {
	if json.Valid(b) && len(bytes.TrimSpace(b)) > 0 {
		return b
	}
	return []byte("null")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func newID() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
