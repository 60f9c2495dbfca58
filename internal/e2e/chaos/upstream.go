package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Upstream is a naive service behind the gateways and workers: it applies
// every request it receives — no deduplication, no fencing — and
// remembers, per key, each application with its fencing token in arrival
// order. Each answer carries a charge id of its own, so two applications of
// one key give two different answers. Whatever it counts twice, idemgate
// let through twice. It serves the proxy route (upstreamPath) and is the
// receiver of the jobs' HTTP deliveries (deliveryPath).
type Upstream struct {
	latency time.Duration
	srv     *http.Server
	ln      net.Listener
	served  chan error
	seq     atomic.Uint64

	mu      sync.Mutex
	applied map[string][]Application
}

// Application is one request the upstream applied.
type Application struct {
	Token  int64 // Idempotency-Fencing-Token; 0 when missing or not a number
	At     time.Time
	Charge string
}

const (
	// upstreamPath is the path of the proxy route, forwarded as is.
	upstreamPath = "/v1/charges"
	// deliveryPath receives the jobs' deliveries.
	deliveryPath = "/hooks/charges"
)

// chargeBody is what clients send, proxied as is or delivered as a job's
// data. Ref names the key in the body, so the upstream needs no
// assumption about how the gateway or the worker forwards the key.
type chargeBody struct {
	Ref  string      `json:"ref"`
	Data *chargeBody `json:"data"` // a delivery: the job's payload
}

// StartUpstream serves the upstream on a free loopback port; each request
// is applied on arrival and answered after a latency drawn between
// latency/2 and latency*3/2, so that faults find requests in flight.
func StartUpstream(latency time.Duration) (*Upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &Upstream{latency: latency, ln: ln, served: make(chan error, 1), applied: map[string][]Application{}}
	u.srv = &http.Server{Handler: http.HandlerFunc(u.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go func() { u.served <- u.srv.Serve(ln) }()
	return u, nil
}

// URL is the upstream's base URL.
func (u *Upstream) URL() string { return "http://" + u.ln.Addr().String() }

func (u *Upstream) serveHTTP(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil {
		return // never fully received: not applied
	}
	var body chargeBody
	if err := json.Unmarshal(raw, &body); err == nil && body.Data != nil {
		body = *body.Data
	}
	if body.Ref == "" {
		http.Error(w, "want a JSON body with ref, or a delivery of one", http.StatusBadRequest)
		return
	}
	token, _ := strconv.ParseInt(r.Header.Get("Idempotency-Fencing-Token"), 10, 64)
	charge := fmt.Sprintf("ch_%08d", u.seq.Add(1))
	u.mu.Lock()
	u.applied[body.Ref] = append(u.applied[body.Ref], Application{Token: token, At: time.Now(), Charge: charge})
	u.mu.Unlock()

	select {
	case <-time.After(u.latency/2 + rand.N(u.latency)):
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/charges/"+charge)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"charge_id": charge, "result_ref": charge, "ref": body.Ref, "fencing_token": token})
}

// Applied returns a copy of every application, by key.
func (u *Upstream) Applied() map[string][]Application {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string][]Application, len(u.applied))
	for k, apps := range u.applied {
		out[k] = append([]Application(nil), apps...)
	}
	return out
}

// Close stops serving and waits for the server's goroutine.
func (u *Upstream) Close() error {
	err := u.srv.Close()
	if serr := <-u.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
