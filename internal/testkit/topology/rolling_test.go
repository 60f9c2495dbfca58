package topology

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/internal/testkit"
	"github.com/idemgate/idemgate/internal/testkit/proc"
)

// The rolling restart: three gateways behind nginx (deploy/nginx/idemgate.conf
// as shipped), restarted one by one with SIGTERM under steady load.
const (
	rollingGateways = 3
	// rollingDrainDelay is longer than the example's fail_timeout (2s), as
	// the example asks.
	rollingDrainDelay = 3 * time.Second
	// plainClients send each request once; retryingClients retry a key
	// until it succeeds.
	plainClients    = 4
	retryingClients = 4
	// Each client sends at most loadRequests requests, one every
	// loadPause, and at most loadAttempts attempts at one key.
	loadRequests = 3000
	loadPause    = 10 * time.Millisecond
	loadAttempts = 200
)

// TestRollingRestartBehindNginx restarts each of three gateways in turn
// behind nginx while clients keep sending POSTs, and checks what a user
// would see: a client that never retries gets no error and no 5xx, a
// client that retries gets the same answer for every attempt of a key, and
// every key's effect happens exactly once at the upstream.
func TestRollingRestartBehindNginx(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nginx and three gateway processes")
	}
	Binary(t, "nginx") // before the build: skip early when it is missing
	dbURL := testkit.Postgres(t)
	bin := BuildIdemgate(t)
	up := newEffectUpstream(t)
	dir := t.TempDir()

	gws := make([]*rollingGateway, rollingGateways)
	for i := range gws {
		gw, err := newRollingGateway(dir, bin, fmt.Sprintf("gateway-%d", i+1), dbURL, up.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gw.stop)
		gws[i] = gw
	}
	for _, gw := range gws {
		if err := gw.start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, gw := range gws {
		addrs = append(addrs, gw.addr)
	}
	ngx := StartNginx(t, port, exampleSite(t, port, addrs))

	ctx, stopLoad := context.WithTimeout(t.Context(), 45*time.Second)
	defer stopLoad()
	var (
		wg       sync.WaitGroup
		plain    = make([]plainStats, plainClients)
		retrying = make([]retryStats, retryingClients)
	)
	l := &load{base: ngx.URL, client: &http.Client{
		Timeout:   20 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: plainClients + retryingClients},
	}}
	defer l.client.CloseIdleConnections()
	for i := range plain {
		wg.Go(func() { plain[i] = l.plain(ctx, fmt.Sprintf("p%d", i)) })
	}
	for i := range retrying {
		wg.Go(func() { retrying[i] = l.retrying(ctx, fmt.Sprintf("r%d", i)) })
	}

	// Steady load first, then each gateway in turn, then steady load again.
	proc.Sleep(ctx, time.Second)
	var restarts int
	var longestDrain time.Duration
	var sawDraining int
	for _, gw := range gws {
		drained, draining, err := gw.restart(ctx)
		if err != nil {
			stopLoad()
			wg.Wait()
			t.Fatalf("restarting %s: %v\n%s", gw.name, err, gw.logTail(30))
		}
		restarts++
		longestDrain = max(longestDrain, drained)
		if draining {
			sawDraining++
		}
		t.Logf("%s restarted: %s from SIGTERM to exit", gw.name, drained.Round(time.Millisecond))
	}
	proc.Sleep(ctx, time.Second)
	stopLoad()
	wg.Wait()

	// The figures.
	var p plainStats
	for _, s := range plain {
		p.add(s)
	}
	var r retryStats
	for _, s := range retrying {
		r.add(s)
	}
	// Why nginx gave up on a gateway: a closed listener refuses the
	// connection; a keep-alive connection closed under a request is reset
	// or closed before the answer.
	var refused, dropped, noneLive int
	for line := range strings.Lines(ngx.ErrorLog()) {
		switch {
		case strings.Contains(line, "Connection refused"):
			refused++
		case strings.Contains(line, "prematurely closed"), strings.Contains(line, "reset by peer"):
			dropped++
		case strings.Contains(line, "no live upstreams"):
			noneLive++
		}
	}
	t.Logf("restarts: %d (drain_delay %s, longest SIGTERM to exit %s; /readyz seen 503 while draining for %d of them)",
		restarts, rollingDrainDelay, longestDrain.Round(time.Millisecond), sawDraining)
	t.Logf("plain clients: %d requests, %d 2xx, %d 4xx, %d 5xx, %d connection errors", p.sent, p.ok, p.status4xx, p.status5xx, p.connErrors)
	t.Logf("retrying clients: %d keys (%d done), %d attempts: %d 2xx, %d 409, %d other 4xx, %d 5xx, %d connection errors",
		r.keys, r.done, r.attempts, r.ok, r.conflicts, r.other4xx, r.status5xx, r.connErrors)
	t.Logf("nginx: %d requests sent on to another gateway after the first failed (refused connections %d, connections dropped under a request %d, no live gateway %d); upstream effects: %d",
		ngx.PassedOn(), refused, dropped, noneLive, up.total())

	// What a user would notice.
	if p.connErrors != 0 || p.status5xx != 0 || p.ok != p.sent {
		t.Errorf("plain clients: %d of %d requests failed (%d connection errors, %d 5xx, %d 4xx), want none; first: %s",
			p.sent-p.ok, p.sent, p.connErrors, p.status5xx, p.status4xx, p.firstFailure)
	}
	if r.done != r.keys {
		t.Errorf("retrying clients: %d of %d keys never succeeded within %d attempts; first failure: %s", r.keys-r.done, r.keys, loadAttempts, r.firstFailure)
	}
	if r.mismatches != 0 {
		t.Errorf("retrying clients: %d keys got different answers on different attempts; first: %s", r.mismatches, r.firstMismatch)
	}
	if p.sent < 100 || r.keys < 50 {
		t.Errorf("too little load to mean anything: %d plain requests, %d retried keys", p.sent, r.keys)
	}
	if restarts != rollingGateways {
		t.Errorf("%d restarts, want %d", restarts, rollingGateways)
	}
	keys := append(p.okKeys, r.okKeys...)
	wrong := 0
	for _, k := range keys {
		if n := up.effects(k); n != 1 {
			if wrong == 0 {
				t.Errorf("key %s: %d effects at the upstream, want exactly 1", k, n)
			}
			wrong++
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d succeeded keys did not have exactly one effect", wrong, len(keys))
	}
	if n := up.maxEffects(); n > 1 {
		t.Errorf("a key had %d effects at the upstream, want at most 1", n)
	}
}

var (
	exampleServers = regexp.MustCompile(`(?m)^(\s*)server\s+10\.0\.0\.\d+:8080(\s[^;]*)?;\n`)
	exampleListen  = regexp.MustCompile(`(?m)^(\s*)listen\s+80;`)
)

// exampleSite is deploy/nginx/idemgate.conf with the gateways' addresses
// for its example servers (keeping their parameters) and port for its
// listener.
func exampleSite(t *testing.T, port int, gateways []string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "nginx", "idemgate.conf"))
	if err != nil {
		t.Fatal(err)
	}
	site := string(b)
	m := exampleServers.FindStringSubmatch(site)
	if m == nil || !exampleListen.MatchString(site) {
		t.Fatal(`deploy/nginx/idemgate.conf: no "server 10.0.0.N:8080 ...;" line or no "listen 80;": the test fills these in`)
	}
	var servers strings.Builder
	for _, addr := range gateways {
		fmt.Fprintf(&servers, "%sserver %s%s;\n", m[1], addr, m[2])
	}
	first := true
	site = exampleServers.ReplaceAllStringFunc(site, func(string) string {
		if first {
			first = false
			return servers.String()
		}
		return ""
	})
	return exampleListen.ReplaceAllString(site, "${1}listen 127.0.0.1:"+strconv.Itoa(port)+";")
}

// effectUpstream is the service behind the gateways. Each call is an
// effect; it answers 201 with a body naming the key and the effect's
// number, so two effects of one key give two different answers.
type effectUpstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	byID map[string]int // client key → effects
	n    int
}

func newEffectUpstream(t *testing.T) *effectUpstream {
	u := &effectUpstream{byID: map[string]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		// The gateway forwards the key scoped to the tenant: "{tenant}:{key}".
		key := strings.TrimPrefix(r.Header.Get("Idempotency-Key"), r.Header.Get(gateway.HeaderTenant)+":")
		u.mu.Lock()
		u.n++
		n := u.n
		u.byID[key]++
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"effect":%d}`+"\n", key, n)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *effectUpstream) effects(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byID[key]
}

func (u *effectUpstream) maxEffects() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	most := 0
	for _, n := range u.byID {
		most = max(most, n)
	}
	return most
}

func (u *effectUpstream) total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n
}

// rollingGateway is one `idemgate serve` on a port it keeps across
// restarts.
type rollingGateway struct {
	name, addr string
	bin        string
	args       []string
	log        *os.File
	p          *proc.Proc
}

func newRollingGateway(dir, bin, name, dbURL, upstream string) (*rollingGateway, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cfg := fmt.Sprintf(`listen: %q
admin_listen: ""
store: postgres
database_url: %q
auth: {mode: none}
log: {level: info, format: text}
server: {drain_delay: %s, shutdown_timeout: 20s}
routes:
  - {name: orders, methods: [POST], path: /v1/orders, upstream: %q}
`, addr, dbURL, rollingDrainDelay, upstream)
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &rollingGateway{name: name, addr: addr, bin: bin, args: []string{"serve", "--config", path}, log: log}, nil
}

// start runs the gateway and waits until its /readyz answers 200.
func (g *rollingGateway) start(ctx context.Context) error {
	p, err := proc.Start(proc.Spec{Name: g.name, Path: g.bin, Args: g.args, Env: proc.ChildEnv(), Log: g.log})
	if err != nil {
		return err
	}
	g.p = p
	return proc.WaitUntil(ctx, 30*time.Second, g.name+" ready", p, func(ctx context.Context) error {
		status, err := g.ready(ctx)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("/readyz: %d", status)
		}
		return err
	})
}

func (g *rollingGateway) ready(ctx context.Context) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.addr+"/readyz", nil)
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// restart stops the gateway with SIGTERM, waits for it to exit cleanly
// and starts it again. It returns the time from SIGTERM to exit and
// whether /readyz was seen answering 503 meanwhile.
func (g *rollingGateway) restart(ctx context.Context) (time.Duration, bool, error) {
	start := time.Now()
	if err := g.p.Signal(syscall.SIGTERM); err != nil {
		return 0, false, err
	}
	draining := false
	for !g.p.Exited() && time.Since(start) < 30*time.Second {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		status, err := g.ready(rctx)
		cancel()
		draining = draining || (err == nil && status == http.StatusServiceUnavailable)
		g.p.Wait(50 * time.Millisecond)
	}
	drained := time.Since(start)
	if !g.p.Exited() {
		return drained, draining, errors.New("still running 30s after SIGTERM")
	}
	if err := g.p.Err(); err != nil {
		return drained, draining, fmt.Errorf("exited with %v after SIGTERM, want 0", err)
	}
	return drained, draining, g.start(ctx)
}

func (g *rollingGateway) stop() {
	if g.p != nil {
		g.p.Stop(syscall.SIGTERM, 30*time.Second)
	}
	g.log.Close()
}

func (g *rollingGateway) logTail(lines int) string {
	b, _ := os.ReadFile(g.log.Name())
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// load is the clients' side of the test: POSTs through nginx.
type load struct {
	base   string
	client *http.Client
}

// plainStats is what a client that never retries saw.
type plainStats struct {
	sent, ok, status4xx, status5xx, connErrors int
	okKeys                                     []string
	firstFailure                               string
}

func (s *plainStats) add(o plainStats) {
	s.sent += o.sent
	s.ok += o.ok
	s.status4xx += o.status4xx
	s.status5xx += o.status5xx
	s.connErrors += o.connErrors
	s.okKeys = append(s.okKeys, o.okKeys...)
	if s.firstFailure == "" {
		s.firstFailure = o.firstFailure
	}
}

// plain sends POSTs, each with a key of its own and once, until
// ctx ends.
func (l *load) plain(ctx context.Context, name string) plainStats {
	var s plainStats
	for i := 0; i < loadRequests && ctx.Err() == nil; i++ {
		key := newKey(name, i)
		status, _, err := l.post(ctx, key)
		if ctx.Err() != nil {
			break // the test is over; this request does not count
		}
		s.sent++
		switch {
		case err != nil:
			s.connErrors++
		case status >= 500:
			s.status5xx++
		case status >= 400:
			s.status4xx++
		case status >= 200 && status < 300:
			s.ok++
			s.okKeys = append(s.okKeys, key)
		}
		if (err != nil || status >= 300) && s.firstFailure == "" {
			s.firstFailure = fmt.Sprintf("key %s: %d %v", key, status, err)
		}
		proc.Sleep(ctx, loadPause)
	}
	return s
}

// retryStats is what a client that retries saw.
type retryStats struct {
	keys, done, attempts, ok, conflicts, other4xx, status5xx, connErrors int
	mismatches                                                           int
	okKeys                                                               []string
	firstFailure, firstMismatch                                          string
}

func (s *retryStats) add(o retryStats) {
	s.keys += o.keys
	s.done += o.done
	s.attempts += o.attempts
	s.ok += o.ok
	s.conflicts += o.conflicts
	s.other4xx += o.other4xx
	s.status5xx += o.status5xx
	s.connErrors += o.connErrors
	s.mismatches += o.mismatches
	s.okKeys = append(s.okKeys, o.okKeys...)
	if s.firstFailure == "" {
		s.firstFailure = o.firstFailure
	}
	if s.firstMismatch == "" {
		s.firstMismatch = o.firstMismatch
	}
}

// retrying sends each key until it succeeds, retrying on a
// connection error, a 5xx or a 409, and then sends it once more, as a
// client that never saw the first answer would: every successful attempt
// must get the same answer.
func (l *load) retrying(ctx context.Context, name string) retryStats {
	var s retryStats
	for i := 0; s.attempts < loadRequests && ctx.Err() == nil; i++ {
		key := newKey(name, i)
		s.keys++
		var answers []string
	attempts:
		for attempt := 0; len(answers) < 2 && attempt < loadAttempts; attempt++ {
			// Once the load stops, a key already begun is still finished.
			status, body, err := l.post(context.WithoutCancel(ctx), key)
			s.attempts++
			switch {
			case err != nil:
				s.connErrors++
			case status == http.StatusConflict:
				s.conflicts++
			case status >= 500:
				s.status5xx++
			case status >= 400:
				s.other4xx++
				if s.firstFailure == "" {
					s.firstFailure = fmt.Sprintf("key %s: %d %s", key, status, body)
				}
				break attempts // a 4xx other than 409 is final
			default:
				s.ok++
				answers = append(answers, strconv.Itoa(status)+" "+body)
				continue
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(answers) == 0 {
			if s.firstFailure == "" {
				s.firstFailure = "key " + key + ": no success"
			}
			continue
		}
		s.done++
		s.okKeys = append(s.okKeys, key)
		for _, a := range answers[1:] {
			if a != answers[0] {
				s.mismatches++
				if s.firstMismatch == "" {
					s.firstMismatch = fmt.Sprintf("key %s: %q, then %q", key, answers[0], a)
				}
				break
			}
		}
		proc.Sleep(ctx, loadPause)
	}
	return s
}

// post sends one POST with the key through nginx and reads the answer.
func (l *load) post(ctx context.Context, key string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.base+"/v1/orders", bytes.NewReader([]byte(`{"sku":"a-1","qty":1}`)))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// newKey is the key of a client's i-th request, unique across runs.
func newKey(client string, i int) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return client + "-" + strconv.Itoa(i) + "-" + hex.EncodeToString(b)
}
