// submitJob and waitJob against a real gateway and worker (PostgreSQL in a
// schema of the test's own, Redis on a queue of its own), the job delivered
// over HTTP to a receiver in this test.
import assert from "node:assert/strict";
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import pg from "pg";
import { Idemgate, IdemgateProblem } from "@idemgate/client";
import { json, startServer, type TestServer } from "./helpers.js";
import type { BatchItem } from "@idemgate/client";
import { childEnv, publicReady, run, skipWithoutBinary, start, tempFile, workerReady, type Running } from "./process.js";

const databaseUrl = process.env.TEST_DATABASE_URL;
const redisUrl = process.env.TEST_REDIS_URL;
const skip =
  skipWithoutBinary ||
  (databaseUrl && redisUrl
    ? false
    : "TEST_DATABASE_URL and TEST_REDIS_URL not set: skipping submitJob/waitJob against a real gateway and worker (make test sets them)");

const apiKey = `sdk-test-${randomUUID()}`;
const suffix = randomBytes(6).toString("hex");
const schema = `sdk_${suffix}`;
const queue = `sdk${suffix}`;

interface Delivery {
  headers: Record<string, string | string[] | undefined>;
  body: { job_id: string; business_key: string; data: { order_id: string; quantity: number } };
}

describe("jobs against a real gateway and worker", { skip, timeout: 300_000 }, () => {
  const deliveries: Delivery[] = [];
  // A delivery of an order whose id starts with "hold-" waits for its
  // answer here; the test resolves it with the status to send.
  const held = new Map<string, (status: number) => void>();
  let receiver: TestServer;
  let gateway: Running | undefined;
  let worker: Running | undefined;
  let removeConfig: () => Promise<void> = async () => {};
  let schemaCreated = false;
  let client: Idemgate;

  const admin = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const c = new pg.Client({ connectionString: databaseUrl });
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end();
    }
  };

  before(async () => {
    receiver = await startServer((req, res, body) => {
      const delivery = JSON.parse(body.toString("utf8")) as Delivery["body"];
      deliveries.push({ headers: req.headers, body: delivery });
      if (delivery.data.order_id.startsWith("hold-")) {
        held.set(delivery.data.order_id, (status) => json(res, status, { result_ref: "r-held" }));
        return;
      }
      json(res, 200, { result_ref: "r-1" });
    });
    await admin((c) => c.query(`CREATE SCHEMA ${schema}`));
    schemaCreated = true;
    const dbUrl = new URL(databaseUrl!);
    dbUrl.searchParams.set("search_path", schema);

    const config = `listen: "127.0.0.1:0"
admin_listen: ""
store: postgres
database_url: "${dbUrl.href}"
redis_url: "${redisUrl}"
auth: {mode: api_key}
tenants:
  - {name: acme, api_key_sha256: ["${createHash("sha256").update(apiKey).digest("hex")}"]}
jobs:
  - task: shipment.book
    queue: ${queue}
    schema: {type: object, additionalProperties: false, required: [order_id, quantity], properties: {order_id: {type: string, minLength: 1}, quantity: {type: integer, minimum: 1}}}
    business_key: "shipment:{order_id}"
    resource: "order:{order_id}"
    deliver: {http: {url: "${receiver.url}/hooks", secret: "whsec_dGVzdC1kZWxpdmVyeS1zZWNyZXQtb2YtMzItYnl0ZXM=", timeout: 10s}}
routes:
  - {name: shipments, methods: [POST], path: /v1/shipments, enqueue: {task: shipment.book}, batch: {path: "/v1/shipments:batch", max_items: 10}}
worker:
  admin_listen: "127.0.0.1:0"
  queues: {${queue}: 1}
  shutdown_timeout: 5s
`;
    const cfg = await tempFile("idemgate.yaml", config);
    removeConfig = cfg.remove;
    const env = childEnv({ DATABASE_URL: dbUrl.href, REDIS_URL: redisUrl! });
    await run(["migrate", "up", "--config", cfg.file], env);
    gateway = await start(["serve", "--config", cfg.file], publicReady, env);
    worker = await start(["worker", "--config", cfg.file], workerReady, env);
    client = new Idemgate({ baseUrl: gateway.url, apiKey, retry: { minBackoffMs: 50, maxBackoffMs: 1000 } });
  });

  after(async () => {
    await worker?.stop();
    await gateway?.stop();
    await receiver?.close();
    await removeConfig();
    if (schemaCreated) await admin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
  });

  test("submitJob, then waitJob: succeeded with the receiver's result_ref", async () => {
    const orderId = `o-${randomUUID()}`;
    const job = await client.submitJob("/v1/shipments", { order_id: orderId, quantity: 2 });
    assert.match(job.id, /^job_[0-9a-f]{32}$/);
    assert.equal(job.task, "shipment.book");
    assert.ok(["queued", "processing", "retrying", "succeeded"].includes(job.status), job.status);

    const done = await client.waitJob(job.id, { timeoutMs: 120_000 });
    assert.equal(done.status, "succeeded", JSON.stringify(done));
    assert.equal(done.result_ref, "r-1");
    assert.equal(done.id, job.id);

    const mine = deliveries.filter((d) => d.body.job_id === job.id);
    assert.equal(mine.length, 1, "delivered once");
    assert.equal(mine[0]!.headers["webhook-id"], job.id);
    assert.equal(mine[0]!.headers["idempotency-key"], `shipment:${orderId}`);
    assert.deepEqual(mine[0]!.body.data, { order_id: orderId, quantity: 2 });
  });

  test("submitBatch: each item is the job a single submit with its key names; atomic refuses; getBatch counts", async () => {
    const id = randomUUID();
    const items: BatchItem<Record<string, unknown>>[] = [
      { idempotencyKey: `b-${id}-1`, payload: { order_id: `o-${id}-1`, quantity: 1 } },
      { idempotencyKey: `b-${id}-2`, payload: { order_id: `o-${id}-2`, quantity: 2 }, delay: 3600 },
      { idempotencyKey: `b-${id}-3`, payload: { order_id: `o-${id}-3` } },
    ];
    const res = await client.submitBatch("/v1/shipments:batch", items, { idempotencyKey: `batch-${id}` });
    assert.deepEqual(res.counts, { accepted: 2, rejected: 1 });
    assert.equal(res.items[1]!.job?.status, "scheduled");
    assert.equal(res.items[2]!.status, 422);
    assert.equal(res.items[2]!.problem?.type, "https://idemgate.dev/problems/invalid-payload");
    const alone = await client.submitJob("/v1/shipments", items[0]!.payload, { idempotencyKey: items[0]!.idempotencyKey });
    assert.equal(alone.id, res.items[0]!.job?.id);
    const again = await client.submitBatch("/v1/shipments:batch", items, { idempotencyKey: `batch-${id}` });
    assert.deepEqual(again, res);

    const refused = await client
      .submitBatch("/v1/shipments:batch", [items[0]!, { idempotencyKey: `b-${id}-4`, payload: { quantity: 4 } }], {
        idempotencyKey: `atomic-${id}`,
        atomic: true,
      })
      .then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(refused instanceof IdemgateProblem, String(refused));
    assert.equal(refused.slug, "batch-refused");

    const state = await client.getBatch(res.batch_id);
    assert.equal(state.items, 3);
    assert.equal(state.accepted, 2);
    assert.equal(state.counts["scheduled"], 1);
  });

  test("submitJob twice with one idempotencyKey names one job", async () => {
    const orderId = `o-${randomUUID()}`;
    const idempotencyKey = `ship-${orderId}`;
    const payload = { order_id: orderId, quantity: 1 };
    const a = await client.submitJob("/v1/shipments", payload, { idempotencyKey });
    const b = await client.submitJob("/v1/shipments", payload, { idempotencyKey });
    assert.equal(b.id, a.id);
    const again = await client.request("POST", "/v1/shipments", payload, { idempotencyKey });
    assert.equal(again.status, 202);
    assert.equal(again.replayed, true);
    assert.equal(again.headers.get("Location"), `/v1/jobs/${a.id}`);
    const done = await client.waitJob(a.id, { timeoutMs: 120_000 });
    assert.equal(done.status, "succeeded");
    assert.equal(deliveries.filter((d) => d.body.job_id === a.id).length, 1);

    const reused = await client
      .submitJob("/v1/shipments", { order_id: orderId, quantity: 5 }, { idempotencyKey })
      .then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(reused instanceof IdemgateProblem, String(reused));
    assert.equal(reused.isKeyReused(), true);
  });

  test("cancelJob: a job in flight is cancelling, and the receiver's failure answer cancels it; a finished one is not cancellable", async () => {
    const orderId = `hold-${randomUUID()}`;
    const job = await client.submitJob("/v1/shipments", { order_id: orderId, quantity: 1 });
    for (let i = 0; !held.has(orderId); i++) {
      assert.ok(i < 1200, "the delivery never arrived");
      await new Promise((r) => setTimeout(r, 50));
    }
    const cancelling = await client.cancelJob(job.id);
    assert.equal(cancelling.status, "cancelling");
    assert.ok(cancelling.cancel_requested_at, "cancel_requested_at is set");
    held.get(orderId)!(500);
    const done = await client.waitJob(job.id, { timeoutMs: 120_000 });
    assert.equal(done.status, "cancelled", JSON.stringify(done));
    assert.equal(deliveries.filter((d) => d.body.job_id === job.id).length, 1, "no attempt after the cancel");
    assert.equal((await client.cancelJob(job.id)).status, "cancelled", "a cancel converges");

    const ok = await client.submitJob("/v1/shipments", { order_id: `o-${randomUUID()}`, quantity: 1 });
    assert.equal((await client.waitJob(ok.id, { timeoutMs: 120_000 })).status, "succeeded");
    const late = await client.cancelJob(ok.id).then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(late instanceof IdemgateProblem, String(late));
    assert.equal(late.status, 409);
    assert.equal(late.isNotCancellable(), true);
  });

  test("listJobs: the tenant's jobs newest first, page after page; a bad filter is a 400 problem naming it", async () => {
    const since = new Date(Date.now() - 1);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const job = await client.submitJob("/v1/shipments", { order_id: `list-${randomUUID()}`, quantity: 1 });
      ids.unshift(job.id);
    }
    const listed: string[] = [];
    for await (const job of client.listJobs({ task: "shipment.book", createdAfter: since, limit: 1 })) listed.push(job.id);
    assert.deepEqual(listed, ids);
    const pages: number[] = [];
    for await (const page of client.listJobPages({ createdAfter: since, limit: 2 })) pages.push(page.items.length);
    assert.deepEqual(pages, [2, 1]);

    const err = await (async () => {
      for await (const _ of client.listJobs({ limit: 501 })) assert.fail("listed");
    })().then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(err instanceof IdemgateProblem, String(err));
    assert.equal(err.status, 400);
    assert.deepEqual(err.errors.map((e) => e.field), ["limit"]);
  });

  test("a payload that breaks the schema: 422 invalid-payload with its errors", async () => {
    const err = await client
      .submitJob("/v1/shipments", { order_id: "", quantity: 0 })
      .then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(err instanceof IdemgateProblem, String(err));
    assert.equal(err.status, 422);
    assert.equal(err.isInvalidPayload(), true);
    assert.equal(err.attempts, 1);
    const fields = err.errors.map((e) => e.field).sort();
    assert.deepEqual(fields, ["order_id", "quantity"]);
    for (const e of err.errors) assert.ok(e.message !== "");
  });
});
