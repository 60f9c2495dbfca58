// The fenced, once-per-key write, in one PostgreSQL transaction: the same
// protocol as idemgate's Go package receiver, in tables of this receiver's
// own so that both can share a database.
import type { Pool, PoolClient } from "pg";
import type { Delivery, Shipment } from "./envelope";

export const schema = `
CREATE TABLE IF NOT EXISTS node_receiver_deliveries (
    tenant          text        NOT NULL,
    idempotency_key text        NOT NULL,
    resource        text        NOT NULL,
    fencing_token   bigint      NOT NULL,
    job_id          text        NOT NULL,
    result_ref      text        NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, idempotency_key)
);
CREATE TABLE IF NOT EXISTS node_receiver_fences (
    tenant        text        NOT NULL,
    resource      text        NOT NULL,
    fencing_token bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, resource)
);
-- One row per applied effect, deliberately without a unique key on the
-- order: a duplicate would show here instead of being hidden.
CREATE TABLE IF NOT EXISTS node_shipments (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant          text        NOT NULL,
    idempotency_key text        NOT NULL,
    order_id        text        NOT NULL,
    quantity        bigint      NOT NULL,
    fencing_token   bigint      NOT NULL,
    job_id          text        NOT NULL,
    booked_at       timestamptz NOT NULL DEFAULT now()
);`;

// StaleError: a newer fencing token has been applied to the resource.
export class StaleError extends Error {
  constructor(
    readonly token: string,
    readonly latest: string,
  ) {
    super(`stale fencing token ${token} (latest ${latest})`);
  }
}

export interface Applied {
  resultRef: string;
  replayed: boolean;
}

export async function ensureSchema(pool: Pool): Promise<void> {
  const c = await pool.connect();
  try {
    await c.query("BEGIN");
    // Replicas starting together would race on CREATE TABLE IF NOT EXISTS.
    await c.query("SELECT pg_advisory_xact_lock(hashtext('node_receiver_schema'))");
    await c.query(schema);
    await c.query("COMMIT");
  } catch (err) {
    await c.query("ROLLBACK").catch(() => {});
    throw err;
  } finally {
    c.release();
  }
}

// book books s once per (tenant, key), fenced per (tenant, resource).
export async function book(pool: Pool, d: Delivery, resource: string, s: Shipment): Promise<Applied> {
  const c = await pool.connect();
  let broken: unknown;
  try {
    await c.query("BEGIN");
    const applied = await inTransaction(c, d, resource, s);
    await c.query("COMMIT");
    return applied;
  } catch (err) {
    // A failed ROLLBACK means the connection is unusable: drop it.
    await c.query("ROLLBACK").catch((e: unknown) => {
      broken = e;
    });
    throw err;
  } finally {
    c.release(broken instanceof Error ? broken : undefined);
  }
}

async function inTransaction(c: PoolClient, d: Delivery, resource: string, s: Shipment): Promise<Applied> {
  // The fence: ON CONFLICT DO UPDATE locks the resource's row even when the
  // WHERE refuses the update, so two attempts on one resource queue here.
  const fence = await c.query(
    `INSERT INTO node_receiver_fences AS f (tenant, resource, fencing_token) VALUES ($1, $2, $3)
     ON CONFLICT (tenant, resource) DO UPDATE SET fencing_token = excluded.fencing_token, updated_at = now()
      WHERE f.fencing_token <= excluded.fencing_token
     RETURNING f.fencing_token`,
    [d.tenant, resource, d.fencingToken],
  );
  if (fence.rowCount === 0) {
    const latest = await c.query<{ t: string }>(
      "SELECT fencing_token::text AS t FROM node_receiver_fences WHERE tenant = $1 AND resource = $2",
      [d.tenant, resource],
    );
    throw new StaleError(d.fencingToken, latest.rows[0]?.t ?? "?");
  }

  // The claim: a concurrent delivery of the same key waits on the primary
  // key until this transaction ends, then finds the row.
  const claim = await c.query(
    `INSERT INTO node_receiver_deliveries (tenant, idempotency_key, resource, fencing_token, job_id, result_ref)
     VALUES ($1, $2, $3, $4, $5, '')
     ON CONFLICT (tenant, idempotency_key) DO NOTHING`,
    [d.tenant, d.businessKey, resource, d.fencingToken, d.jobId],
  );
  if (claim.rowCount === 0) {
    const prev = await c.query<{ result_ref: string }>(
      "SELECT result_ref FROM node_receiver_deliveries WHERE tenant = $1 AND idempotency_key = $2",
      [d.tenant, d.businessKey],
    );
    return { resultRef: prev.rows[0].result_ref, replayed: true };
  }

  const effect = await c.query<{ id: string }>(
    `INSERT INTO node_shipments (tenant, idempotency_key, order_id, quantity, fencing_token, job_id)
     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id::text`,
    [d.tenant, d.businessKey, s.orderId, s.quantity, d.fencingToken, d.jobId],
  );
  const resultRef = `shp_node_${effect.rows[0].id}`;
  await c.query(
    "UPDATE node_receiver_deliveries SET result_ref = $3 WHERE tenant = $1 AND idempotency_key = $2",
    [d.tenant, d.businessKey, resultRef],
  );
  return { resultRef, replayed: false };
}

// effects counts the applied effects per tenant/key: a key applied twice
// shows 2.
export async function effects(pool: Pool): Promise<{ count: number; keys: Record<string, number> }> {
  const r = await pool.query<{ k: string; n: number }>(
    "SELECT tenant || '/' || idempotency_key AS k, count(*)::int AS n FROM node_shipments GROUP BY 1 ORDER BY 1",
  );
  const keys: Record<string, number> = {};
  let count = 0;
  for (const row of r.rows) {
    keys[row.k] = row.n;
    count += row.n;
  }
  return { count, keys };
}
