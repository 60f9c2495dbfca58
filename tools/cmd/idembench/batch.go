package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver, for the migrations

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency/pgstore"
	"github.com/idemgate/idemgate/migrations"
)

// batchSchema holds the batch bench's tables, dropped before and after.
const batchSchema = "idembench_batch"

const batchUsage = `idembench batch — jobs accepted per second: one batch of N items against N single submits, on one gateway

The gateway runs in this process on a loopback port, with the PostgreSQL
idempotency store, on a schema of its own (` + batchSchema + `, dropped
before and after), and sends its tasks to an asynq queue of the run's own,
deleted at the end.
`

type batchOptions struct {
	dbURL, redisURL string
	redisDB         int
	items, rounds   int
	concurrency     int
}

// runBatchBench measures jobs accepted per second, rounds times: items
// single submits sent by concurrency clients, then one batch of items,
// each on keys of its own. It reports each round and the median of each.
func runBatchBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var o batchOptions
	fs := flag.NewFlagSet("idembench batch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, batchUsage); fs.PrintDefaults() }
	fs.StringVar(&o.dbURL, "database-url", or(getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL (loopback)")
	fs.StringVar(&o.redisURL, "redis-url", or(getenv("REDIS_URL"), "redis://127.0.0.1:6379/0"), "Redis (loopback, one node)")
	fs.IntVar(&o.redisDB, "redis-db", 14, "the Redis logical database used instead of the URL's")
	fs.IntVar(&o.items, "items", 500, "items of the batch, and single submits of each round")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds of each")
	fs.IntVar(&o.concurrency, "concurrency", 8, "clients sending the single submits at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.items < 1 || o.items > job.MaxBatchItems || o.rounds < 1 || o.concurrency < 1 {
		return fmt.Errorf("-items must be 1..%d, -rounds and -concurrency at least 1", job.MaxBatchItems)
	}

	redisURL, rdb, err := benchRedis(ctx, o.redisURL, o.redisDB, 0)
	if err != nil {
		return err
	}
	_ = rdb.Close() // asynq opens its own connections
	dbURL, _, err := schemaURL(o.dbURL, batchSchema)
	if err != nil {
		return err
	}
	if err := resetBatchSchema(ctx, o.dbURL, true); err != nil {
		return err
	}
	defer resetBatchSchema(context.WithoutCancel(ctx), o.dbURL, false)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	opt, err := asynq.ParseRedisURI(redisURL)
	if err != nil {
		return err
	}
	queue := asynq.NewClient(opt)
	defer queue.Close()
	// The tasks go to a queue of the run's own, deleted with them at the
	// end: nothing else in the Redis database is touched.
	qname := fmt.Sprintf("idembench-batch-%d", time.Now().UnixNano())
	inspector := asynq.NewInspector(opt)
	defer func() {
		_ = inspector.DeleteQueue(qname, true)
		_ = inspector.Close()
	}()

	url, stop, err := serveBatchGateway(ctx, pool, queue, qname)
	if err != nil {
		return err
	}
	defer stop()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.concurrency}}
	defer client.CloseIdleConnections()
	fmt.Fprintf(stdout, "jobs accepted per second: %d single submits (concurrency %d) against one batch of %d items\n\n", o.items, o.concurrency, o.items)
	fmt.Fprintf(stdout, "| round | single submits, jobs/s | one batch, jobs/s | ratio |\n|---|---:|---:|---:|\n")
	var singles, batches []float64
	for round := range o.rounds {
		prefix := fmt.Sprintf("r%d-", round)
		s, err := timeSingles(ctx, client, url, prefix+"s-", o.items, o.concurrency)
		if err != nil {
			return err
		}
		b, err := timeBatch(ctx, client, url, prefix+"b-", o.items)
		if err != nil {
			return err
		}
		singles, batches = append(singles, s), append(batches, b)
		fmt.Fprintf(stdout, "| %d | %.0f | %.0f | %.1f× |\n", round+1, s, b, b/s)
	}
	ms, mb := median(singles), median(batches)
	fmt.Fprintf(stdout, "| median | %.0f | %.0f | %.1f× |\n", ms, mb, mb/ms)
	return nil
}

// resetBatchSchema drops the bench's schema and, with create, makes it
// again with idemgate's migrations.
func resetBatchSchema(ctx context.Context, base string, create bool) error {
	db, err := sql.Open("pgx", base)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+batchSchema+" CASCADE"); err != nil {
		return fmt.Errorf("postgres: %w (start it with `make services`)", err)
	}
	if !create {
		return nil
	}
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+batchSchema); err != nil {
		return err
	}
	dbURL, _, err := schemaURL(base, batchSchema)
	if err != nil {
		return err
	}
	mdb, err := sql.Open("pgx", dbURL)
	if err != nil {
		return err
	}
	defer mdb.Close()
	return migrations.Up(ctx, mdb)
}

// batchBenchKey is the bench tenant's API key.
const batchBenchKey = "bench-key"

// serveBatchGateway serves, on a loopback port, a gateway whose route
// emails enqueues email.send jobs and has the batch path /v1/emails:batch.
func serveBatchGateway(ctx context.Context, pool *pgxpool.Pool, queue *asynq.Client, qname string) (string, func(), error) {
	spec, err := job.NewSpec("email.send", []byte(`{"type":"object","required":["to","subject"],
		"properties":{"to":{"type":"string"},"subject":{"type":"string"},"body":{"type":"string"}}}`), "email:{to}:{subject}", "")
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256([]byte(batchBenchKey))
	store := pgstore.New(pool)
	g, err := gateway.New(gateway.Options{
		Auth:      auth.Config{Mode: auth.ModeAPIKey, Tenants: []auth.TenantKeys{{Name: "bench", APIKeySHA256s: []string{hex.EncodeToString(sum[:])}}}},
		Store:     store,
		StoreName: "postgres",
		Jobs:      job.NewSubmitter(pool, queue),
		Logger:    slog.New(slog.DiscardHandler),
		Routes: []gateway.RouteOptions{{
			Name: "emails", Methods: []string{http.MethodPost}, Path: "/v1/emails",
			Enqueue: &gateway.EnqueueOptions{Spec: spec, Queue: qname,
				Batch: &gateway.BatchOptions{Path: "/v1/emails:batch", MaxItems: job.MaxBatchItems}},
		}},
	})
	if err != nil {
		store.Close()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		store.Close()
		return "", nil, err
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	return "http://" + ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		wg.Wait()
		_ = g.Close(sctx)
		store.Close()
	}, nil
}

func emailBody(key string) string {
	return fmt.Sprintf(`{"to":"%s@example.com","subject":"welcome","body":"hello"}`, key)
}

// postSubmit sends one submit and checks its status.
func postSubmit(ctx context.Context, client *http.Client, url, key, body string, want int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+batchBenchKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s: %d %.300s", url, resp.StatusCode, got)
	}
	return nil
}

// timeSingles sends n single submits from concurrency clients and
// returns the jobs accepted per second.
func timeSingles(ctx context.Context, client *http.Client, url, prefix string, n, concurrency int) (float64, error) {
	keys := make(chan string, n)
	for i := range n {
		keys <- fmt.Sprintf("%s%d", prefix, i)
	}
	close(keys)
	errs := make([]error, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range concurrency {
		wg.Go(func() {
			for k := range keys {
				if err := postSubmit(ctx, client, url+"/v1/emails", k, emailBody(k), http.StatusAccepted); err != nil {
					errs[c] = err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// timeBatch sends one batch of n items and returns the jobs accepted per
// second.
func timeBatch(ctx context.Context, client *http.Client, url, prefix string, n int) (float64, error) {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		k := fmt.Sprintf("%s%d", prefix, i)
		fmt.Fprintf(&b, `{"idempotency_key":%q,"body":%s}`, k, emailBody(k))
	}
	b.WriteString(`]}`)
	start := time.Now()
	if err := postSubmit(ctx, client, url+"/v1/emails:batch", prefix+"batch", b.String(), http.StatusOK); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
