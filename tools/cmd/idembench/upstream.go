package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// upstream is the service behind both proxies: it answers every POST with a
// small 201 JSON document at once, so what is measured is the proxy. A path
// ending in /slow is held until release is called (the in-flight scenario),
// at most maxHold.
type upstream struct {
	n       atomic.Int64
	held    atomic.Int64 // requests being held right now
	maxHold time.Duration

	mu   sync.Mutex
	hold chan struct{}
}

func newUpstream(maxHold time.Duration) *upstream {
	return &upstream{maxHold: maxHold, hold: make(chan struct{})}
}

// release lets every held request answer.
func (u *upstream) release() {
	u.mu.Lock()
	close(u.hold)
	u.hold = make(chan struct{})
	u.mu.Unlock()
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	if strings.HasSuffix(r.URL.Path, "/slow") {
		u.mu.Lock()
		hold := u.hold
		u.mu.Unlock()
		u.held.Add(1)
		defer u.held.Add(-1)
		t := time.NewTimer(u.maxHold)
		select {
		case <-hold:
		case <-r.Context().Done():
		case <-t.C:
		}
		t.Stop()
	}
	id := "pay_" + strconv.FormatInt(u.n.Add(1), 36)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", "/v1/payments/"+id)
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":"`+id+`","object":"payment","status":"succeeded","amount_cents":1250,"currency":"EUR"}`)
}

// serveUpstream starts u on a loopback port and returns its address and a
// function that stops it.
func serveUpstream(u *upstream) (string, func(), error) {
	addr, stop, _, err := serveUpstreamIdle(u)
	return addr, stop, err
}

// serveUpstreamIdle is serveUpstream that also returns a function closing
// the upstream's idle connections (the proxy's pooled ones).
func serveUpstreamIdle(u *upstream) (string, func(), func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	srv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	stop := func() {
		u.release()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}
	closeIdle := func() {
		// Turning keep-alives off closes the idle connections.
		srv.SetKeepAlivesEnabled(false)
		srv.SetKeepAlivesEnabled(true)
	}
	return ln.Addr().String(), stop, closeIdle, nil
}
