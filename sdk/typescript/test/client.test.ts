// The client against a local server playing the gateway: what each attempt
// carries, what is retried, how long it waits, when it stops.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  Idemgate,
  IdemgateError,
  IdemgateProblem,
  IdemgateRedirectError,
  IdemgateTimeoutError,
  encodeIdempotencyKey,
  parseRetryAfter,
  problemSlug,
  type Job,
} from "@idemgate/client";
import { client, fakeTime, json, problem, startServer, type TestServer } from "./helpers.js";

async function withServer(handler: Parameters<typeof startServer>[0], fn: (s: TestServer) => Promise<void>): Promise<void> {
  const s = await startServer(handler);
  try {
    await fn(s);
  } finally {
    await s.close();
  }
}

const payment = { amount_cents: 1250, currency: "EUR", note: "été" };

describe("request", () => {
  test("503, 503, 201: three attempts, one key and the same body bytes on each", async () => {
    await withServer(
      (_req, res, _body, n) => {
        if (n < 3) problem(res, 503, "idempotency-store-unavailable");
        else json(res, 201, { id: "pay_1" }, { Location: "/v1/payments/pay_1" });
      },
      async (s) => {
        const time = fakeTime();
        const res = await client(s.url, time).request<{ id: string }>("POST", "/v1/payments", payment);
        assert.equal(res.status, 201);
        assert.equal(res.attempts, 3);
        assert.deepEqual(res.body, { id: "pay_1" });
        assert.equal(res.headers.get("Location"), "/v1/payments/pay_1");
        assert.equal(res.replayed, false);
        assert.match(res.idempotencyKey ?? "", /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
        assert.equal(s.seen.length, 3);
        const want = Buffer.from(JSON.stringify(payment));
        for (const r of s.seen) {
          assert.equal(r.method, "POST");
          assert.equal(r.url, "/v1/payments");
          assert.equal(r.headers["idempotency-key"], `"${res.idempotencyKey}"`);
          assert.equal(r.headers["authorization"], "Bearer test-key");
          assert.equal(r.headers["content-type"], "application/json");
          assert.deepEqual(r.body, want);
        }
        assert.equal(time.sleeps.length, 2);
      },
    );
  });

  test("two calls draw two keys; a given business key is sent as it is", async () => {
    await withServer(
      (_req, res) => json(res, 201, {}),
      async (s) => {
        const c = client(s.url, fakeTime());
        const a = await c.request("POST", "/v1/payments", payment);
        const b = await c.request("POST", "/v1/payments", payment);
        const k = await c.request("POST", "/v1/payments", payment, { idempotencyKey: 'order-42 "x"' });
        assert.notEqual(a.idempotencyKey, b.idempotencyKey);
        assert.equal(k.idempotencyKey, 'order-42 "x"');
        assert.equal(s.seen[2]!.headers["idempotency-key"], '"order-42 \\"x\\""');
      },
    );
  });

  test("409 idempotency-key-in-use: waits Retry-After, then gets the replay", async () => {
    await withServer(
      (_req, res, _body, n) => {
        // A problem_base of another gateway: the slug is what counts.
        if (n === 1) problem(res, 409, "idempotency-key-in-use", { headers: { "Retry-After": "2" }, base: "https://errors.example.com/gw/" });
        else json(res, 201, { id: "pay_1" }, { "Idempotent-Replayed": "true" });
      },
      async (s) => {
        const time = fakeTime();
        const retries: number[] = [];
        const res = await client(s.url, time, { onRetry: (e) => retries.push(e.status ?? 0) }).request("POST", "/v1/payments", payment);
        assert.equal(res.status, 201);
        assert.equal(res.replayed, true);
        assert.equal(res.attempts, 2);
        assert.equal(time.sleeps.length, 1);
        assert.ok(time.sleeps[0]! >= 2000, `slept ${time.sleeps[0]} ms, want at least the 2 s of Retry-After`);
        assert.deepEqual(retries, [409]);
        assert.equal(s.seen[0]!.headers["idempotency-key"], s.seen[1]!.headers["idempotency-key"]);
      },
    );
  });

  test("429 rate-limited: waits Retry-After", async () => {
    await withServer(
      (_req, res, _body, n) => {
        if (n === 1) problem(res, 429, "rate-limited", { headers: { "Retry-After": "3", "RateLimit-Remaining": "0" } });
        else json(res, 200, { ok: true });
      },
      async (s) => {
        const time = fakeTime();
        const res = await client(s.url, time).request("POST", "/v1/payments", payment);
        assert.equal(res.attempts, 2);
        assert.deepEqual(res.body, { ok: true });
        assert.ok(time.sleeps[0]! >= 3000, `slept ${time.sleeps[0]} ms, want at least 3000`);
      },
    );
  });

  test("408, 425, 502, 504 and an HTTP-date Retry-After are retried", async () => {
    const statuses = [408, 425, 502, 504];
    await withServer(
      (_req, res, _body, n) => {
        if (n <= statuses.length) json(res, statuses[n - 1]!, { n });
        else json(res, 200, {});
      },
      async (s) => {
        const res = await client(s.url, fakeTime()).request("PUT", "/v1/things/1", { a: 1 });
        assert.equal(res.attempts, 5);
      },
    );
    assert.equal(parseRetryAfter("Wed, 21 Oct 2015 07:28:10 GMT", Date.parse("Wed, 21 Oct 2015 07:28:00 GMT")), 10_000);
    assert.equal(parseRetryAfter("7"), 7000);
    assert.equal(parseRetryAfter("soon"), undefined);
    assert.equal(parseRetryAfter(null), undefined);
  });

  test("422 idempotency-key-reused is thrown at once", async () => {
    await withServer(
      (_req, res) => problem(res, 422, "idempotency-key-reused"),
      async (s) => {
        const time = fakeTime();
        const err = await client(s.url, time)
          .request("POST", "/v1/payments", payment, { idempotencyKey: "k-1" })
          .then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(err instanceof IdemgateProblem);
        assert.ok(err instanceof IdemgateError);
        assert.ok(err instanceof Error);
        assert.equal(err.isKeyReused(), true);
        assert.equal(err.isOutcomeUnknown(), false);
        assert.equal(err.isInvalidPayload(), false);
        assert.equal(err.slug, "idempotency-key-reused");
        assert.equal(err.type, "https://idemgate.dev/problems/idempotency-key-reused");
        assert.equal(err.status, 422);
        assert.equal(err.title, "idempotency key reused");
        assert.equal(err.detail, "detail of idempotency-key-reused");
        assert.equal(err.instance, "urn:uuid:01a2384e-26cb-7f2a-9944-c9c3269e0d37");
        assert.equal(err.request_id, "req-idempotency-key-reused");
        assert.equal(err.retryable, false, "no retryable member: decided from the status");
        assert.equal(err.idempotency_key, undefined);
        assert.equal(err.documentation, undefined);
        assert.equal(err.idempotencyKey, "k-1");
        assert.equal(err.attempts, 1);
        assert.equal(err.name, "IdemgateProblem");
        assert.match(err.message, /^422 /);
        assert.equal(s.seen.length, 1);
        assert.deepEqual(time.sleeps, []);
      },
    );
  });

  test("400, 401, 404, 409 outcome-unknown and 500 are not retried", async () => {
    const cases: [number, string][] = [
      [400, "idempotency-key-invalid"],
      [401, "unauthorized"],
      [404, "not-found"],
      [409, "idempotency-outcome-unknown"],
      [500, "internal"],
    ];
    for (const [status, slug] of cases) {
      await withServer(
        (_req, res) => problem(res, status, slug),
        async (s) => {
          const err = await client(s.url, fakeTime())
            .request("POST", "/v1/payments", payment)
            .then(() => assert.fail("resolved"), (e: unknown) => e);
          assert.ok(err instanceof IdemgateProblem);
          assert.equal(err.status, status);
          assert.equal(err.slug, slug);
          assert.equal(err.isOutcomeUnknown(), slug === "idempotency-outcome-unknown");
          assert.equal(s.seen.length, 1, `${status} ${slug} was sent ${s.seen.length} times`);
        },
      );
    }
  });

  test("the document's retryable decides: true on a 500 is retried, false on a 503 is not", async () => {
    const cases: [number, boolean, number][] = [
      [500, true, 2],
      [503, false, 1],
    ];
    for (const [status, retryable, attempts] of cases) {
      await withServer(
        (_req, res, _body, n) => (n === 1 ? problem(res, status, "x", { members: { retryable } }) : json(res, 201, {})),
        async (s) => {
          const res = await client(s.url, fakeTime())
            .request("POST", "/v1/payments", payment)
            .then(
              (r) => r,
              (e: unknown) => e,
            );
          assert.equal(s.seen.length, attempts, `${status} retryable=${retryable}`);
          if (attempts === 1) {
            assert.ok(res instanceof IdemgateProblem);
            assert.equal(res.retryable, false);
          }
        },
      );
    }
  });

  test("a problem names its key, its occurrence and the draft's section", async () => {
    const documentation = "https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header#section-2.6";
    await withServer(
      (_req, res) =>
        problem(res, 409, "idempotency-outcome-unknown", {
          members: { retryable: false, idempotency_key: "order-42", documentation },
          headers: { Link: `<${documentation}>; rel="describedby"; type="text/html"` },
        }),
      async (s) => {
        const err = await client(s.url, fakeTime())
          .request("POST", "/v1/payments", payment, { idempotencyKey: "order-42" })
          .then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(err instanceof IdemgateProblem);
        assert.equal(err.isOutcomeUnknown(), true);
        assert.equal(err.retryable, false);
        assert.equal(err.idempotency_key, "order-42");
        assert.equal(err.documentation, documentation);
        assert.equal(err.instance, "urn:uuid:01a2384e-26cb-7f2a-9944-c9c3269e0d37");
        assert.equal(s.seen.length, 1);
      },
    );
  });

  test("an upstream's own 400 is a problem of type about:blank with its body", async () => {
    await withServer(
      (_req, res) => json(res, 400, { code: "card_declined" }, { "Idempotent-Replayed": "true" }),
      async (s) => {
        const err = await client(s.url, fakeTime())
          .request("POST", "/v1/payments", payment)
          .then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(err instanceof IdemgateProblem);
        assert.equal(err.type, "about:blank");
        assert.equal(err.status, 400);
        assert.equal(err.replayed, true);
        assert.deepEqual(err.body, { code: "card_declined" });
        assert.deepEqual(err.errors, []);
        assert.equal(s.seen.length, 1);
      },
    );
  });

  test("a replayed 503 is the stored outcome: not retried", async () => {
    await withServer(
      (_req, res) => json(res, 503, {}, { "Idempotent-Replayed": "true" }),
      async (s) => {
        await assert.rejects(client(s.url, fakeTime()).request("POST", "/v1/payments", payment), IdemgateProblem);
        assert.equal(s.seen.length, 1);
      },
    );
  });

  test("422 invalid-payload carries errors", async () => {
    const errors = [
      { field: "quantity", message: "must be at least 1" },
      { field: "x", message: "is not a field of this task" },
    ];
    await withServer(
      (_req, res) => problem(res, 422, "invalid-payload", { errors }),
      async (s) => {
        const err = await client(s.url, fakeTime())
          .submitJob("/v1/shipments", { order_id: "o-1", quantity: 0, x: 1 })
          .then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(err instanceof IdemgateProblem);
        assert.equal(err.isInvalidPayload(), true);
        assert.equal(err.isKeyReused(), false);
        assert.deepEqual(err.errors, errors);
        assert.equal(s.seen.length, 1);
      },
    );
  });

  test("an AbortSignal aborted during a wait stops retrying", async () => {
    await withServer(
      (_req, res) => problem(res, 503, "idempotency-store-unavailable", { headers: { "Retry-After": "1" } }),
      async (s) => {
        const ctl = new AbortController();
        const time = fakeTime((_ms, n) => {
          if (n === 2) ctl.abort();
        });
        await assert.rejects(
          client(s.url, time).request("POST", "/v1/payments", payment, { signal: ctl.signal }),
          (e: unknown) => e instanceof Error && e.name === "AbortError",
        );
        assert.equal(s.seen.length, 2);
        assert.equal(time.sleeps.length, 2);
      },
    );
  });

  test("an AbortSignal aborted during an attempt stops it and every retry; an aborted one sends nothing", async () => {
    await withServer(
      () => {
        /* never answers */
      },
      async (s) => {
        const ctl = new AbortController();
        const c = client(s.url, fakeTime());
        const call = c.request("POST", "/v1/payments", payment, { signal: ctl.signal });
        while (s.seen.length === 0) await new Promise((r) => setTimeout(r, 10));
        ctl.abort(new Error("caller gave up"));
        await assert.rejects(call, /caller gave up/);
        assert.equal(s.seen.length, 1);
        await assert.rejects(c.request("POST", "/v1/payments", payment, { signal: ctl.signal }), /caller gave up/);
        assert.equal(s.seen.length, 1);
      },
    );
  });

  test("maxElapsedMs: no wait starts that would end past it", async () => {
    await withServer(
      (_req, res) => problem(res, 503, "idempotency-store-unavailable", { headers: { "Retry-After": "1" } }),
      async (s) => {
        const time = fakeTime();
        const err = await client(s.url, time, { retry: { maxElapsedMs: 2500, maxAttempts: 100 } })
          .request("POST", "/v1/payments", payment)
          .then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(err instanceof IdemgateProblem);
        assert.equal(err.status, 503);
        assert.equal(err.attempts, 3);
        assert.equal(s.seen.length, 3);
        assert.deepEqual(time.sleeps, [1000, 1000]);
        assert.ok(time.sleeps.reduce((a, b) => a + b, 0) <= 2500);
      },
    );
  });

  test("maxAttempts bounds the attempts; the backoff doubles with full jitter up to maxBackoffMs", async () => {
    await withServer(
      (_req, res) => json(res, 502, {}),
      async (s) => {
        const time = fakeTime();
        const err = await client(s.url, time, {
          random: () => 0.999,
          retry: { maxAttempts: 6, minBackoffMs: 100, maxBackoffMs: 1000 },
        })
          .request("POST", "/v1/payments", payment)
          .then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(err instanceof IdemgateProblem);
        assert.equal(err.attempts, 6);
        assert.equal(s.seen.length, 6);
        assert.deepEqual(time.sleeps, [99, 199, 399, 799, 999]);
      },
    );
    await withServer(
      (_req, res) => json(res, 502, {}),
      async (s) => {
        const time = fakeTime();
        await assert.rejects(client(s.url, time, { random: () => 0 }).request("POST", "/v1/payments", payment));
        assert.equal(s.seen.length, 8, "the default maxAttempts is 8");
        assert.deepEqual(time.sleeps, [0, 0, 0, 0, 0, 0, 0]);
      },
    );
  });

  test("GET carries no key and is retried", async () => {
    await withServer(
      (_req, res, _body, n) => (n === 1 ? json(res, 503, {}) : json(res, 200, { status: "ok" })),
      async (s) => {
        const res = await client(s.url, fakeTime()).request("GET", "/healthz", undefined, { idempotencyKey: "ignored" });
        assert.equal(res.idempotencyKey, undefined);
        assert.equal(res.attempts, 2);
        for (const r of s.seen) {
          assert.equal(r.headers["idempotency-key"], undefined);
          assert.equal(r.body.length, 0);
        }
        const head = await client(s.url, fakeTime()).request("HEAD", "/healthz");
        assert.equal(head.body, undefined);
        assert.equal(s.seen[2]!.headers["idempotency-key"], undefined);
      },
    );
  });

  test("a network error (the server destroys the socket) is retried with the same key", async () => {
    await withServer(
      (req, res, _body, n) => {
        if (n === 1) req.socket.destroy();
        else json(res, 201, { id: "pay_1" });
      },
      async (s) => {
        const time = fakeTime();
        const res = await client(s.url, time).request("POST", "/v1/payments", payment);
        assert.equal(res.status, 201);
        assert.equal(res.attempts, 2);
        assert.equal(s.seen.length, 2);
        assert.equal(s.seen[0]!.headers["idempotency-key"], s.seen[1]!.headers["idempotency-key"]);
        assert.deepEqual(s.seen[0]!.body, s.seen[1]!.body);
        assert.equal(time.sleeps.length, 1);
      },
    );
  });

  test("network errors until maxAttempts: an IdemgateError with the cause", async () => {
    await withServer(
      (req) => req.socket.destroy(),
      async (s) => {
        const err = await client(s.url, fakeTime(), { retry: { maxAttempts: 3 } })
          .request("POST", "/v1/payments", payment, { idempotencyKey: "k-net" })
          .then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(err instanceof IdemgateError);
        assert.ok(!(err instanceof IdemgateProblem));
        assert.equal(err.attempts, 3);
        assert.equal(err.idempotencyKey, "k-net");
        assert.ok(err.cause !== undefined);
        assert.equal(s.seen.length, 3);
      },
    );
  });

  test("attemptTimeoutMs abandons a hung attempt and retries it", async () => {
    await withServer(
      (_req, res, _body, n) => {
        if (n > 1) json(res, 201, { id: "pay_1" });
        // the first attempt never gets an answer
      },
      async (s) => {
        const res = await client(s.url, fakeTime(), { attemptTimeoutMs: 200 }).request("POST", "/v1/payments", payment);
        assert.equal(res.attempts, 2);
        assert.equal(s.seen[0]!.headers["idempotency-key"], s.seen[1]!.headers["idempotency-key"]);
      },
    );
  });

  test("a Uint8Array body is sent as it is, and a caller's later change does not reach a retry", async () => {
    const bytes = new Uint8Array([1, 2, 3]);
    await withServer(
      (_req, res, _body, n) => {
        bytes[0] = 9;
        if (n === 1) json(res, 503, {});
        else json(res, 200, {});
      },
      async (s) => {
        await client(s.url, fakeTime()).request("POST", "/v1/blobs", bytes);
        assert.deepEqual([...s.seen[1]!.body], [1, 2, 3]);
        assert.equal(s.seen[1]!.headers["content-type"], "application/octet-stream");
      },
    );
  });

  test("the base URL keeps its path prefix", async () => {
    await withServer(
      (_req, res) => json(res, 200, {}),
      async (s) => {
        await new Idemgate({ baseUrl: `${s.url}/gw/`, sleep: async () => {} }).request("GET", "v1/jobs/x");
        assert.equal(s.seen[0]!.url, "/gw/v1/jobs/x");
        assert.equal(s.seen[0]!.headers["authorization"], undefined);
      },
    );
  });
});

describe("jobs", () => {
  const doc = (status: Job["status"], resultRef: string | null = null): Job => ({
    id: "job_0123456789abcdef0123456789abcdef",
    task: "shipment.book",
    status,
    attempts: status === "queued" ? 0 : 1,
    result_ref: resultRef,
    error: null,
    created_at: "2026-12-03T08:00:00Z",
    updated_at: "2026-12-03T08:00:01Z",
  });

  test("submitJob resolves to the 202's job document; waitJob polls with a growing pause", async () => {
    const statuses: Job["status"][] = ["queued", "processing", "retrying", "processing", "succeeded"];
    await withServer(
      (req, res, _body, n) => {
        if (req.method === "POST") {
          json(res, 202, doc("queued"), { Location: `/v1/jobs/${doc("queued").id}` });
          return;
        }
        const s = statuses[n - 2]!;
        json(res, 200, doc(s, s === "succeeded" ? "r-1" : null), { "Cache-Control": "no-store" });
      },
      async (s) => {
        const time = fakeTime();
        const c = client(s.url, time, { random: () => 1 });
        const job = await c.submitJob("/v1/shipments", { order_id: "o-1", quantity: 2 });
        assert.equal(job.status, "queued");
        assert.equal(job.id, doc("queued").id);
        const done = await c.waitJob(job.id, { minIntervalMs: 100, maxIntervalMs: 500 });
        assert.equal(done.status, "succeeded");
        assert.equal(done.result_ref, "r-1");
        assert.equal(s.seen[1]!.url, `/v1/jobs/${job.id}?wait=30`);
        assert.equal(s.seen[1]!.headers["idempotency-key"], undefined);
        assert.deepEqual(time.sleeps, [100, 200, 400, 500]);
      },
    );
  });

  test("waitJob resolves to a failed job, and gives up after timeoutMs", async () => {
    await withServer(
      (req, res) => json(res, 200, doc(new URL(req.url ?? "/", "http://x").pathname.endsWith("/bad") ? "failed" : "processing")),
      async (s) => {
        const time = fakeTime();
        const c = client(s.url, time);
        assert.equal((await c.waitJob("bad")).status, "failed");
        const err = await c.waitJob("slow", { timeoutMs: 1000 }).then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(err instanceof IdemgateTimeoutError);
        assert.equal(err.job?.status, "processing");
        assert.ok(time.sleeps.reduce((a, b) => a + b, 0) <= 1000);
      },
    );
  });

  test("waitJob holds each GET on the gateway with If-None-Match, and does not sleep between them", async () => {
    let clock = 1_000_000; // moved on by the gateway's holds
    const held = (ms: number): void => {
      clock += ms;
    };
    await withServer(
      (_req, res, _body, n) => {
        if (n === 1) {
          held(30_000);
          json(res, 200, doc("processing"), { ETag: '"e1"' });
        } else if (n === 2) {
          held(30_000);
          res.writeHead(304, { ETag: '"e1"' });
          res.end();
        } else {
          held(1_500);
          json(res, 200, doc("succeeded", "r-1"), { ETag: '"e2"' });
        }
      },
      async (s) => {
        const time = fakeTime();
        const c = client(s.url, time, { now: () => clock });
        const done = await c.waitJob("job_1", { timeoutMs: 600_000 });
        assert.equal(done.status, "succeeded");
        assert.equal(s.seen.length, 3);
        assert.deepEqual(
          s.seen.map((r) => [r.url, r.headers["if-none-match"]]),
          [
            ["/v1/jobs/job_1?wait=30", undefined],
            ["/v1/jobs/job_1?wait=30", '"e1"'],
            ["/v1/jobs/job_1?wait=30", '"e1"'],
          ],
        );
        assert.deepEqual(time.sleeps, []);
      },
    );
  });

  test("waitJob against a gateway that answers at once unchanged polls with a growing pause", async () => {
    await withServer(
      (_req, res, _body, n) => {
        if (n === 1) json(res, 200, doc("processing"), { ETag: '"e1"' });
        else if (n < 4) {
          res.writeHead(304, { ETag: '"e1"' });
          res.end();
        } else json(res, 200, doc("cancelled"), { ETag: '"e2"' });
      },
      async (s) => {
        const time = fakeTime();
        const c = client(s.url, time, { random: () => 1 });
        const done = await c.waitJob("job_1", { minIntervalMs: 100, maxIntervalMs: 500 });
        assert.equal(done.status, "cancelled");
        assert.deepEqual(time.sleeps, [100, 200, 400]);
      },
    );
  });

  test("cancelJob: 200 cancelled, 202 cancelling, 409 job-not-cancellable, 404; waitJob ends on cancelled", async () => {
    await withServer(
      (req, res) => {
        const id = req.url?.split("/")[3];
        if (req.method === "GET") json(res, 200, doc("cancelled"));
        else if (id === "queued") json(res, 200, doc("cancelled"));
        else if (id === "running") json(res, 202, doc("cancelling"));
        else if (id === "done") problem(res, 409, "job-not-cancellable");
        else problem(res, 404, "not-found");
      },
      async (s) => {
        const c = client(s.url, fakeTime());
        assert.equal((await c.cancelJob("queued")).status, "cancelled");
        assert.equal(s.seen[0]!.method, "POST");
        assert.equal(s.seen[0]!.url, "/v1/jobs/queued/cancel");
        assert.equal((await c.cancelJob("running")).status, "cancelling");
        const late = await c.cancelJob("done").then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(late instanceof IdemgateProblem && late.isNotCancellable() && late.status === 409, String(late));
        const unknown = await c.cancelJob("nope").then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(unknown instanceof IdemgateProblem && !unknown.isNotCancellable() && unknown.status === 404, String(unknown));
        assert.equal((await c.waitJob("running")).status, "cancelled");
      },
    );
  });

  test("submitJob refuses an answer that is not 202", async () => {
    await withServer(
      (_req, res) => json(res, 201, { id: "x" }),
      async (s) => {
        await assert.rejects(client(s.url, fakeTime()).submitJob("/v1/payments", payment), /expected 202/);
      },
    );
  });
});

describe("helpers", () => {
  test("problemSlug takes the last segment whatever the base", () => {
    assert.equal(problemSlug("https://idemgate.dev/problems/idempotency-key-reused"), "idempotency-key-reused");
    assert.equal(problemSlug("https://errors.example.com/gw/rate-limited?lang=en"), "rate-limited");
    assert.equal(problemSlug("urn:example:problems:invalid-payload"), "invalid-payload");
    assert.equal(problemSlug("/problems/internal"), "internal");
    assert.equal(problemSlug("about:blank"), "about:blank");
  });

  test("encodeIdempotencyKey writes an sf-string and refuses what cannot be one", () => {
    assert.equal(encodeIdempotencyKey("abc"), '"abc"');
    assert.equal(encodeIdempotencyKey('a"b\\c'), '"a\\"b\\\\c"');
    assert.throws(() => encodeIdempotencyKey(""), TypeError);
    assert.throws(() => encodeIdempotencyKey("clé"), TypeError);
    assert.throws(() => encodeIdempotencyKey("a\nb"), TypeError);
  });

  test("options are checked", () => {
    assert.throws(() => new Idemgate({ baseUrl: "" }), TypeError);
    assert.throws(() => new Idemgate({ baseUrl: "not a url" }), TypeError);
    assert.throws(() => new Idemgate({ baseUrl: "http://x", retry: { maxAttempts: 0 } }), RangeError);
    assert.throws(() => new Idemgate({ baseUrl: "http://x", retry: { maxElapsedMs: -1 } }), RangeError);
  });
});

describe("redirects", () => {
  for (const status of [301, 302, 303, 307, 308]) {
    test(`a ${status} to another origin is an error, and nothing reaches that origin`, async () => {
      await withServer(
        (_req, res) => json(res, 201, { id: "elsewhere" }),
        async (elsewhere) => {
          await withServer(
            (_req, res) => {
              res.writeHead(status, { Location: `${elsewhere.url}/v1/payments` });
              res.end();
            },
            async (s) => {
              const time = fakeTime();
              await assert.rejects(
                client(s.url, time).request("POST", "/v1/payments", payment, { idempotencyKey: "order-42" }),
                (err: unknown) => {
                  assert.ok(err instanceof IdemgateRedirectError, `got ${String(err)}`);
                  assert.equal(err.status, status);
                  assert.equal(err.location, `${elsewhere.url}/v1/payments`);
                  assert.equal(err.idempotencyKey, "order-42");
                  assert.equal(err.attempts, 1);
                  return true;
                },
              );
              assert.equal(s.seen.length, 1, "a redirect is not retried");
              assert.deepEqual(
                elsewhere.seen.map((r) => [r.method, r.headers["authorization"], r.headers["idempotency-key"], r.body.toString()]),
                [],
              );
              assert.equal(time.sleeps.length, 0);
            },
          );
        },
      );
    });
  }

  test("fetch is asked not to follow redirects", async () => {
    let seen: RequestInit | undefined;
    const gw = new Idemgate({
      baseUrl: "http://gateway.invalid",
      fetch: async (_input, init) => {
        seen = init;
        return new Response('{"id":"pay_1"}', { status: 201, headers: { "Content-Type": "application/json" } });
      },
    });
    await gw.request("POST", "/v1/payments", payment);
    assert.equal(seen?.redirect, "manual");
  });
});
