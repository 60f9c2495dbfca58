// The client against a real gateway (`idemgate serve`, memory store) in
// front of a scripted upstream: one execution per logical call, whatever
// the retries.
import assert from "node:assert/strict";
import { createHash, randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { Idemgate, IdemgateProblem, type IdemgateOptions } from "@idemgate/client";
import { startServer, type TestServer } from "./helpers.js";
import { publicReady, skipWithoutBinary, start, tempFile, type Running } from "./process.js";

const apiKey = `sdk-test-${randomUUID()}`;
const problemBase = "https://errors.example.test/idemgate/";
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Call {
  key: string;
  body: string;
  fencingToken: string;
}

describe("against a real gateway", { skip: skipWithoutBinary, timeout: 180_000 }, () => {
  // The upstream, per Idempotency-Key it receives: under /v1/payments/flaky
  // the first request is answered 503 (not processed), the second after 3 s
  // with 201 (an execution); /v1/payments/down always answers 503.
  const calls = new Map<string, Call[]>();
  const executions = new Map<string, number>();
  let upstream: TestServer;
  let gateway: Running;
  let removeConfig: () => Promise<void> = async () => {};
  let executed = 0;

  const callsOf = (clientKey: string): Call[] =>
    [...calls.entries()].filter(([k]) => k.includes(clientKey)).flatMap(([, v]) => v);
  const executionsOf = (clientKey: string): number =>
    [...executions.entries()].filter(([k]) => k.includes(clientKey)).reduce((n, [, v]) => n + v, 0);

  const newClient = (options: Partial<IdemgateOptions> = {}): Idemgate =>
    new Idemgate({ baseUrl: gateway.url, apiKey, retry: { minBackoffMs: 50, maxBackoffMs: 200 }, ...options });

  before(async () => {
    upstream = await startServer((req, res, body) => {
      const key = String(req.headers["idempotency-key"] ?? "");
      const list = calls.get(key) ?? [];
      list.push({ key, body: body.toString("utf8"), fencingToken: String(req.headers["idempotency-fencing-token"] ?? "") });
      calls.set(key, list);
      const answer503 = (): void => {
        res.writeHead(503, { "Content-Type": "text/plain" });
        res.end("busy");
      };
      if (req.url === "/v1/payments/down" || list.length === 1) {
        answer503();
        return;
      }
      setTimeout(() => {
        if (res.destroyed) return;
        const id = `pay_${++executed}`;
        executions.set(key, (executions.get(key) ?? 0) + 1);
        const text = JSON.stringify({ id, received: JSON.parse(body.toString("utf8")) as unknown });
        res.writeHead(201, { "Content-Type": "application/json", Location: `/v1/payments/${id}` });
        res.end(text);
      }, 3000);
    });
    const config = `listen: "127.0.0.1:0"
admin_listen: ""
store: memory
problem_base: "${problemBase}"
auth: {mode: api_key}
tenants:
  - {name: acme, api_key_sha256: ["${createHash("sha256").update(apiKey).digest("hex")}"]}
idempotency: {lease: 2s}
routes:
  - {name: payments, methods: [POST], path_prefix: /v1/payments, upstream: "${upstream.url}"}
`;
    const cfg = await tempFile("idemgate.yaml", config);
    removeConfig = cfg.remove;
    gateway = await start(["serve", "--config", cfg.file], publicReady);
  });

  after(async () => {
    await gateway?.stop();
    await upstream?.close();
    await removeConfig();
  });

  test("503, then a slow 201 while a second caller meets 409 in-use: one execution, one stored answer", async () => {
    const key = `pay-${randomUUID()}`;
    const payment = { amount_cents: 4200, currency: "EUR", customer: "c-1" };

    const aRetries: (number | undefined)[] = [];
    const first = newClient({ onRetry: (e) => aRetries.push(e.status) }).request<{ id: string }>(
      "POST",
      "/v1/payments/flaky",
      payment,
      { idempotencyKey: key },
    );
    // The second caller (another process with the same business key)
    // arrives while the first one's second attempt runs upstream.
    while (callsOf(key).length < 2) await sleep(20);
    const bSleeps: number[] = [];
    const bRetries: (number | undefined)[] = [];
    const second = newClient({
      sleep: (ms, signal) => {
        bSleeps.push(ms);
        return new Promise((resolve, reject) => {
          const t = setTimeout(resolve, ms);
          signal?.addEventListener("abort", () => {
            clearTimeout(t);
            reject(signal.reason);
          });
        });
      },
      onRetry: (e) => bRetries.push(e.status),
    }).request<{ id: string }>("POST", "/v1/payments/flaky", payment, { idempotencyKey: key });

    const [a, b] = await Promise.all([first, second]);
    assert.equal(a.status, 201);
    assert.equal(a.attempts, 2);
    assert.equal(a.replayed, false);
    assert.deepEqual(aRetries, [503]);

    assert.equal(b.status, 201);
    assert.equal(b.replayed, true);
    assert.ok(b.attempts >= 2, `second caller: ${b.attempts} attempts`);
    assert.equal(bRetries[0], 409, "the second caller met idempotency-key-in-use");
    assert.ok(bSleeps[0]! >= 1000, `waited ${bSleeps[0]} ms after 409, want at least Retry-After (1 s or more)`);
    assert.deepEqual(b.body, a.body, "the second caller got the stored answer");
    assert.equal(b.headers.get("Location"), a.headers.get("Location"));

    // Once done, a retry is a replay at once.
    const c = await newClient().request<{ id: string }>("POST", "/v1/payments/flaky", payment, { idempotencyKey: key });
    assert.equal(c.replayed, true);
    assert.equal(c.headers.get("X-Idempotent-Replayed"), "true");
    assert.equal(c.attempts, 1);
    assert.deepEqual(c.body, a.body);

    assert.equal(executionsOf(key), 1, "one execution upstream");
    const seen = callsOf(key);
    assert.equal(seen.length, 2, "the upstream saw the 503 attempt and the executed one, nothing else");
    assert.equal(new Set(seen.map((s) => s.key)).size, 1, `one key upstream: ${seen.map((s) => s.key).join(", ")}`);
    assert.ok(seen[0]!.key.includes(key));
    assert.equal(new Set(seen.map((s) => s.body)).size, 1, "the same body on every attempt");
    assert.deepEqual(JSON.parse(seen[0]!.body), payment);
  });

  test("the same key with another body: 422 idempotency-key-reused at once", async () => {
    const key = `pay-${randomUUID()}`;
    const c = newClient();
    const done = await c.request("POST", "/v1/payments/flaky", { amount_cents: 1 }, { idempotencyKey: key });
    assert.equal(done.status, 201);
    const before = callsOf(key).length;
    const err = await c
      .request("POST", "/v1/payments/flaky", { amount_cents: 2 }, { idempotencyKey: key })
      .then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(err instanceof IdemgateProblem, String(err));
    assert.equal(err.status, 422);
    assert.equal(err.isKeyReused(), true);
    assert.equal(err.type, `${problemBase}idempotency-key-reused`);
    assert.equal(err.attempts, 1);
    assert.ok(err.request_id !== "");
    assert.equal(err.request_id, err.headers.get("X-Request-Id"));
    assert.match(err.instance, /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(err.instance, `urn:uuid:${err.request_id}`, "a request id the gateway made is a UUIDv7, its own URN");
    assert.equal(err.retryable, false);
    assert.equal(err.idempotency_key, key);
    const section = "https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header#section-2.2";
    assert.equal(err.documentation, section);
    assert.equal(err.headers.get("Link"), `<${section}>; rel="describedby"; type="text/html"`);
    assert.equal(callsOf(key).length, before, "nothing reached the upstream");
  });

  test("an aborted signal stops retrying", async () => {
    const key = `down-${randomUUID()}`;
    const ctl = new AbortController();
    const call = newClient({ retry: { maxAttempts: 1000, minBackoffMs: 100, maxBackoffMs: 200 } }).request(
      "POST",
      "/v1/payments/down",
      { amount_cents: 3 },
      { idempotencyKey: key, signal: ctl.signal },
    );
    while (callsOf(key).length < 2) await sleep(10);
    ctl.abort();
    await assert.rejects(call, (e: unknown) => e instanceof Error && e.name === "AbortError");
    const sent = callsOf(key).length;
    await sleep(600);
    assert.equal(callsOf(key).length, sent, "no attempt after the abort");
    assert.ok(sent < 1000);
  });

  test("maxElapsedMs bounds the retrying", async () => {
    const key = `down-${randomUUID()}`;
    const sleeps: number[] = [];
    const started = Date.now();
    const err = await newClient({
      retry: { maxAttempts: 1000, maxElapsedMs: 1500, minBackoffMs: 100, maxBackoffMs: 400 },
      sleep: async (ms) => {
        sleeps.push(ms);
        await sleep(ms);
      },
    })
      .request("POST", "/v1/payments/down", { amount_cents: 4 }, { idempotencyKey: key })
      .then(() => assert.fail("resolved"), (e: unknown) => e);
    const elapsed = Date.now() - started;
    assert.ok(err instanceof IdemgateProblem, String(err));
    assert.equal(err.status, 503);
    assert.equal(err.retryable, true);
    assert.ok(err.attempts >= 2 && err.attempts < 1000, `${err.attempts} attempts`);
    assert.equal(callsOf(key).length, err.attempts);
    const slept = sleeps.reduce((a, b) => a + b, 0);
    assert.ok(slept <= 1500, `slept ${slept} ms in all`);
    assert.ok(elapsed >= slept);
  });

  test("GET carries no key; the gateway's 404 and 401 are problems", async () => {
    const err = await newClient()
      .getJob("job_00000000000000000000000000000000")
      .then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(err instanceof IdemgateProblem, String(err));
    assert.equal(err.status, 404);
    assert.equal(err.slug, "not-found");
    assert.equal(err.idempotencyKey, undefined);

    const denied = await new Idemgate({ baseUrl: gateway.url, apiKey: "wrong" })
      .request("POST", "/v1/payments/flaky", {})
      .then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(denied instanceof IdemgateProblem, String(denied));
    assert.equal(denied.status, 401);
    assert.equal(denied.slug, "unauthorized");
    assert.equal(denied.attempts, 1);

    const health = await newClient().request<{ status: string }>("GET", "/healthz");
    assert.deepEqual(health.body, { status: "ok" });
  });
});
