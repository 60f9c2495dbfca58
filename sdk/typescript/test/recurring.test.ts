// The recurring schedules' methods: against a scripted server for what
// only a fault shows, then against a real gateway and worker (PostgreSQL
// in a schema of the test's own, Redis on a queue of its own), the fired
// jobs delivered over HTTP to a receiver in this test.
import assert from "node:assert/strict";
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import pg from "pg";
import { Idemgate, IdemgateProblem, type Schedule, type ScheduleSpec } from "@idemgate/client";
import { client, fakeTime, json, problem, startServer, type TestServer } from "./helpers.js";
import { childEnv, publicReady, run, skipWithoutBinary, start, tempFile, workerReady, type Running } from "./process.js";

const schedule: Schedule = {
  id: "reports:monthly",
  task: "report.build",
  cron: "0 2 1 * *",
  timezone: "Europe/Paris",
  body: { region: "eu" },
  overlap: "skip",
  catchup: "none",
  paused: false,
  next_fire_at: "2027-01-01T01:00:00Z",
  next_fire_times: ["2027-01-01T01:00:00Z"],
  source: "api",
  created_at: "2026-12-07T08:00:00Z",
  updated_at: "2026-12-07T08:00:00Z",
};

/** The problem of an unknown schedule, a 404 as the gateway answers it. */
function notFound(res: Parameters<typeof problem>[0]): void {
  problem(res, 404, "not-found", { members: { retryable: false } });
}

describe("recurring schedules: the calls", () => {
  test("an id with a colon is sent with its colon; other characters are escaped", async () => {
    const s = await startServer((_req, res) => json(res, 200, schedule));
    try {
      const c = client(s.url, fakeTime());
      await c.getSchedule("reports:monthly");
      await c.pauseSchedule("a b/c");
      assert.deepEqual(
        s.seen.map((r) => r.url),
        ["/v1/schedules/reports:monthly", "/v1/schedules/a%20b%2Fc/pause"],
      );
    } finally {
      await s.close();
    }
  });

  test("triggerSchedule sends one key on every attempt, the one given or one drawn for the call", async () => {
    const s = await startServer((_req, res, _body, n) => {
      if (n % 2 === 1) problem(res, 503, "queue-unavailable");
      else json(res, 202, { id: "job_0123456789abcdef0123456789abcdef", task: "report.build", status: "queued" });
    });
    try {
      const c = client(s.url, fakeTime());
      await c.triggerSchedule("reports:monthly", { idempotencyKey: "run-now-1" });
      await c.triggerSchedule("reports:monthly");
      const keys = s.seen.map((r) => r.headers["idempotency-key"]);
      assert.equal(keys[0], '"run-now-1"');
      assert.equal(keys[1], keys[0]);
      assert.match(String(keys[2]), /^"[0-9a-f-]{36}"$/);
      assert.equal(keys[3], keys[2]);
    } finally {
      await s.close();
    }
  });

  test("deleteSchedule: a 404 after an unanswered attempt resolves; one at the first attempt or after a 503 rejects", async () => {
    const s = await startServer((req, res, _body, n) => {
      if (n === 1) req.socket.destroy(); // the delete may have happened: no answer
      else if (n === 4) problem(res, 503, "database-unavailable"); // not done
      else notFound(res);
    });
    try {
      const c = client(s.url, fakeTime());
      await c.deleteSchedule("reports:monthly");
      assert.equal(s.seen.length, 2);
      for (const attempts of [1, 2]) {
        const err = await c.deleteSchedule("reports:monthly").then(() => assert.fail("resolved"), (e: unknown) => e);
        assert.ok(err instanceof IdemgateProblem, String(err));
        assert.equal(err.status, 404);
        assert.equal(err.attempts, attempts);
      }
      assert.equal(s.seen.length, 5);
    } finally {
      await s.close();
    }
  });
});

const databaseUrl = process.env.TEST_DATABASE_URL;
const redisUrl = process.env.TEST_REDIS_URL;
const skip =
  skipWithoutBinary ||
  (databaseUrl && redisUrl
    ? false
    : "TEST_DATABASE_URL and TEST_REDIS_URL not set: skipping the recurring schedules against a real gateway and worker (make test sets them)");

const suffix = randomBytes(6).toString("hex");
const schema = `sdk_${suffix}`;
const queue = `sdk${suffix}`;
const acmeKey = `sdk-test-${randomUUID()}`;
const globexKey = `sdk-test-${randomUUID()}`;
const sha256 = (s: string): string => createHash("sha256").update(s).digest("hex");

interface Delivery {
  headers: Record<string, string | string[] | undefined>;
  body: { job_id: string; business_key: string; data: unknown };
}

/** The wall-clock day of the month, hour and minute of an RFC 3339 time in zone. */
function wallClock(at: string, zone: string): string {
  const parts = new Intl.DateTimeFormat("en-GB", { timeZone: zone, day: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23" })
    .formatToParts(new Date(at));
  const part = (type: string): string => parts.find((p) => p.type === type)?.value ?? "";
  return `${part("day")} ${part("hour")}:${part("minute")}`;
}

/** A schedule less what a replace changes however alike the PUTs are. */
function unstamped(s: Schedule): Omit<Schedule, "updated_at"> {
  const { updated_at: _, ...rest } = s;
  return rest;
}

describe("recurring schedules against a real gateway and worker", { skip, timeout: 300_000 }, () => {
  const deliveries: Delivery[] = [];
  let receiver: TestServer;
  let gateway: Running | undefined;
  let worker: Running | undefined;
  let removeConfig: () => Promise<void> = async () => {};
  let schemaCreated = false;
  let acme: Idemgate;
  let globex: Idemgate;

  const id = "reports:monthly";
  const spec: ScheduleSpec = { task: "report.build", cron: "0 2 1 * *", timezone: "Europe/Paris", body: { region: "eu" } };

  const admin = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const c = new pg.Client({ connectionString: databaseUrl });
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end();
    }
  };

  const rejection = async (p: Promise<unknown>): Promise<IdemgateProblem> => {
    const err = await p.then(() => assert.fail("resolved"), (e: unknown) => e);
    assert.ok(err instanceof IdemgateProblem, String(err));
    return err;
  };

  before(async () => {
    receiver = await startServer((req, res, body) => {
      deliveries.push({ headers: req.headers, body: JSON.parse(body.toString("utf8")) as Delivery["body"] });
      json(res, 200, { result_ref: "report-1" });
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
  - {name: acme, api_key_sha256: ["${sha256(acmeKey)}"]}
  - {name: globex, api_key_sha256: ["${sha256(globexKey)}"]}
jobs_api:
  schedules: {max_per_tenant: 2, min_interval: 1m}
jobs:
  - task: report.build
    queue: ${queue}
    schema: {type: object, additionalProperties: false, required: [region], properties: {region: {type: string, minLength: 1}}}
    business_key: "report:{region}"
    deliver: {http: {url: "${receiver.url}/hooks", secret: "whsec_dGVzdC1kZWxpdmVyeS1zZWNyZXQtb2YtMzItYnl0ZXM=", timeout: 10s}}
routes:
  - {name: reports, methods: [POST], path: /v1/reports, enqueue: {task: report.build}}
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
    const retry = { minBackoffMs: 50, maxBackoffMs: 1000 };
    acme = new Idemgate({ baseUrl: gateway.url, apiKey: acmeKey, retry });
    globex = new Idemgate({ baseUrl: gateway.url, apiKey: globexKey, retry });
  });

  after(async () => {
    await worker?.stop();
    await gateway?.stop();
    await receiver?.close();
    await removeConfig();
    if (schemaCreated) await admin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
  });

  test("putSchedule: created, then replaced with the same schedule; its next slots are its cron's in its zone", async () => {
    const before = Date.now();
    const first = await acme.putSchedule(id, spec);
    assert.equal(first.created, true);
    const s = first.schedule;
    assert.equal(s.id, id);
    assert.equal(s.task, "report.build");
    assert.equal(s.cron, "0 2 1 * *");
    assert.equal(s.timezone, "Europe/Paris");
    assert.deepEqual(s.body, { region: "eu" });
    assert.equal(s.overlap, "skip");
    assert.equal(s.catchup, "none");
    assert.equal(s.paused, false);
    assert.equal(s.source, "api");
    assert.equal(s.next_fire_times.length, 5);
    assert.equal(s.next_fire_times[0], s.next_fire_at);
    assert.ok(Date.parse(s.next_fire_at) > before, s.next_fire_at);
    for (let i = 1; i < s.next_fire_times.length; i++) {
      assert.ok(Date.parse(s.next_fire_times[i]!) > Date.parse(s.next_fire_times[i - 1]!), s.next_fire_times.join(" "));
    }
    for (const at of s.next_fire_times) assert.equal(wallClock(at, "Europe/Paris"), "1 02:00", at);

    const second = await acme.putSchedule(id, spec);
    assert.equal(second.created, false);
    assert.deepEqual(unstamped(second.schedule), unstamped(s));
  });

  test("getSchedule and listSchedules show the tenant's schedule; another tenant sees neither", async () => {
    const got = await acme.getSchedule(id);
    assert.equal(got.id, id);
    assert.equal(got.cron, "0 2 1 * *");
    assert.equal(got.last_fire, undefined);
    assert.deepEqual(
      (await acme.listSchedules()).map((s) => s.id),
      [id],
    );

    assert.deepEqual(await globex.listSchedules(), []);
    const err = await rejection(globex.getSchedule(id));
    assert.equal(err.status, 404);
  });

  test("pauseSchedule and resumeSchedule: paused shows on the schedule; pausing twice changes nothing", async () => {
    assert.equal((await acme.pauseSchedule(id)).paused, true);
    assert.equal((await acme.pauseSchedule(id)).paused, true);
    assert.equal((await acme.getSchedule(id)).paused, true);
    assert.equal((await acme.resumeSchedule(id)).paused, false);
    assert.equal((await acme.getSchedule(id)).paused, false);
  });

  test("triggerSchedule: one key fires once and names one job, which runs with the schedule's body", async () => {
    const idempotencyKey = `run-now-${randomUUID()}`;
    const job = await acme.triggerSchedule(id, { idempotencyKey });
    assert.match(job.id, /^job_[0-9a-f]{32}$/);
    assert.equal(job.task, "report.build");
    const again = await acme.triggerSchedule(id, { idempotencyKey });
    assert.equal(again.id, job.id);

    const done = await acme.waitJob(job.id, { timeoutMs: 120_000 });
    assert.equal(done.status, "succeeded", JSON.stringify(done));
    assert.equal(done.result_ref, "report-1");
    const mine = deliveries.filter((d) => d.body.job_id === job.id);
    assert.equal(mine.length, 1, "delivered once");
    assert.deepEqual(mine[0]!.body.data, { region: "eu" });

    const other = await acme.triggerSchedule(id);
    assert.notEqual(other.id, job.id, "a call without a key draws its own");
    assert.equal((await acme.waitJob(other.id, { timeoutMs: 120_000 })).status, "succeeded");

    const err = await rejection(globex.triggerSchedule(id, { idempotencyKey }));
    assert.equal(err.status, 404);
  });

  test("a refused declaration is a 422 problem and stores nothing: invalid-payload naming its fields, schedule-quota-exceeded", async () => {
    const invalid = await rejection(acme.putSchedule("reports:bad", { task: "report.build", every: "30s", body: { region: "" } }));
    assert.equal(invalid.status, 422);
    assert.equal(invalid.isInvalidPayload(), true);
    assert.deepEqual(invalid.errors.map((e) => e.field).sort(), ["body.region", "every"]);
    assert.equal((await rejection(acme.getSchedule("reports:bad"))).status, 404);

    const hourly = (region: string): ScheduleSpec => ({ task: "report.build", every: "1h", body: { region } });
    assert.equal((await globex.putSchedule("g-1", hourly("us"))).created, true);
    assert.equal((await globex.putSchedule("g-2", hourly("us"))).created, true);
    const over = await rejection(globex.putSchedule("g-3", hourly("us")));
    assert.equal(over.status, 422);
    assert.equal(over.slug, "schedule-quota-exceeded");
    assert.equal(over.isScheduleQuotaExceeded(), true);
    assert.equal(over.attempts, 1, "not retried");
    assert.equal((await rejection(globex.getSchedule("g-3"))).status, 404);
    assert.equal((await globex.putSchedule("g-1", hourly("apac"))).created, false, "a schedule at the quota is still replaced");
    await globex.deleteSchedule("g-2");
    assert.equal((await globex.putSchedule("g-3", hourly("us"))).created, true);
    assert.deepEqual(
      (await globex.listSchedules()).map((s) => s.id),
      ["g-1", "g-3"],
    );
  });

  test("deleteSchedule: the schedule is gone, a get is a 404 and so is a second delete; its jobs stay", async () => {
    const fired = await acme.triggerSchedule(id);
    await acme.deleteSchedule(id);
    assert.equal((await rejection(acme.getSchedule(id))).status, 404);
    const again = await rejection(acme.deleteSchedule(id));
    assert.equal(again.status, 404);
    assert.equal(again.attempts, 1);
    assert.deepEqual(await acme.listSchedules(), []);
    assert.equal((await acme.getJob(fired.id)).id, fired.id);
  });
});
