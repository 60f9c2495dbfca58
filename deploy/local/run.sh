#!/usr/bin/env bash
# Runs the example in one process: the gateway, a worker, and partnersim
# (the simulated payment and messaging partner on 127.0.0.1:9100), with the
# given config. Ctrl-C stops everything gracefully.
set -euo pipefail
cd "$(dirname "$0")/../.."
config=${1:-deploy/local/idemgate.yaml}
n=$RANDOM$RANDOM
# The shipments receiver verifies the signatures with the same secret the
# config signs with (the demo one unless SHIP_WEBHOOK_SECRET is set).
export SHIP_WEBHOOK_SECRET=${SHIP_WEBHOOK_SECRET:-whsec_aWRlbWdhdGUtZGVtby1zaGlwbWVudHMtc2VjcmV0ISE=}
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}

cat <<MSG

idemgate dev is starting: gateway http://127.0.0.1:8080, admin 127.0.0.1:9090,
worker admin 127.0.0.1:9091, partnersim http://127.0.0.1:9100, and the
shipments receiver (examples/shipments) http://127.0.0.1:9200.

  console    http://127.0.0.1:9090/admin/ui/   (user any, password admin-token)
  API docs   http://127.0.0.1:8080/openapi.yaml (the OpenAPI document it serves)
  metrics    http://127.0.0.1:9090/metrics (gateway), http://127.0.0.1:9091/metrics (worker)
             curl -s -H 'Authorization: Bearer admin-token' http://127.0.0.1:9090/metrics

Redis and PostgreSQL keep running after Ctrl-C; make stop stops those make run started.

1. A payment through the proxy, sent twice with one key: the second answer is
   the stored first one (Idempotent-Replayed: true); partnersim charges once.

  curl -i -X POST http://127.0.0.1:8080/v1/payments \\
    -H 'Authorization: Bearer demo-key' -H 'Idempotency-Key: pay-$n' \\
    -H 'Content-Type: application/json' -d '{"amount_cents":1250,"currency":"EUR"}'

2. An invoice as a job, submitted twice: both answers are 202 with the same
   job id; poll the job until it has succeeded; the order has one invoice.

  curl -i -X POST http://127.0.0.1:8080/v1/invoices \\
    -H 'Authorization: Bearer demo-key' -H 'Idempotency-Key: inv-$n' \\
    -H 'Content-Type: application/json' -d '{"order_id":"order-$n","amount_cents":4200,"currency":"EUR"}'

  curl -s -H 'Authorization: Bearer demo-key' http://127.0.0.1:8080/v1/jobs/JOB_ID
  psql "\${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}" -c "select * from invoices where order_id = 'order-$n'"

3. A job delivered over HTTP: shipment.book is POSTed, signed, to the
   shipments receiver, which books it once per (tenant, Idempotency-Key).

  curl -i -X POST http://127.0.0.1:8080/v1/shipments \\
    -H 'Authorization: Bearer demo-key' -H 'Idempotency-Key: shp-$n' \\
    -H 'Content-Type: application/json' -d '{"order_id":"order-$n","quantity":2}'

  psql "\${DATABASE_URL}" -c "select * from shipments where order_id = 'order-$n'"

4. Check every business invariant:   ./bin/idemgate-examples reconcile --config $config
   Inspect a key:  curl -s -H 'Authorization: Bearer admin-token' http://127.0.0.1:9090/admin/keys/demo/payments/pay-$n

MSG
./bin/shipments-receiver --listen 127.0.0.1:9200 &
receiver=$!
trap 'kill $receiver 2>/dev/null; wait $receiver 2>/dev/null' EXIT
./bin/idemgate-examples dev --config "$config"
