#!/usr/bin/env bash
# Runs the example: partnersim on 127.0.0.1:9100 as the upstream, and the
# gateway in front of it with the given config. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/../.."
config=${1:-deploy/local/idemgate.yaml}

./bin/partnersim --listen 127.0.0.1:9100 &
sim=$!
trap 'kill "$sim" 2>/dev/null || true; wait "$sim" 2>/dev/null || true' EXIT

key=demo-$RANDOM$RANDOM
cat <<MSG

idemgate is starting on http://127.0.0.1:8080 (admin on 127.0.0.1:9090).
Send a payment, then send it again with the same key: the second answer is
the stored first one, marked Idempotent-Replayed: true, and partnersim
charges once.

  curl -i -X POST http://127.0.0.1:8080/v1/payments \\
    -H 'Authorization: Bearer demo-key' -H 'Idempotency-Key: $key' \\
    -H 'Content-Type: application/json' -d '{"amount_cents":1250,"currency":"EUR"}'

  curl -s http://127.0.0.1:9100/stats     # {"requests":1,"applied":1,...}

Change the body and reuse the key to see 422 idempotency-key-reused.
Inspect the record:
  curl -s -H 'Authorization: Bearer admin-token' http://127.0.0.1:9090/admin/keys/demo/payments/$key

MSG
./bin/idemgate serve --config "$config"
