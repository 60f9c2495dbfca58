// Starts `node dist/server.js` as a user (or idemgate's end-to-end test)
// would, on a random port and in a PostgreSQL schema of its own, and sends
// it deliveries signed by standardwebhooks' Webhook.sign.
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "pg";
import { Webhook } from "standardwebhooks";

const databaseUrl = process.env.TEST_DATABASE_URL;
const skip = databaseUrl ? false : "TEST_DATABASE_URL not set: skipping the PostgreSQL tests of receiver-node (make test sets it)";

const secret = `whsec_${randomBytes(24).toString("base64")}`;
const schema = `receiver_node_${randomBytes(6).toString("hex")}`;

interface Options {
  key?: string; // the business key, by default shipment:{orderId}
  edit?: (h: Record<string, string>) => void; // changes the headers after signing
  signer?: Webhook;
}

interface Answer {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

describe("receiver-node", { skip }, () => {
  let server: ChildProcess;
  let base = "";
  let stderr = "";

  before(async () => {
    server = spawn(process.execPath, [path.join(__dirname, "..", "server.js")], {
      env: { ...process.env, PORT: "0", DATABASE_URL: databaseUrl, WEBHOOK_SECRET: secret, PGSCHEMA: schema },
      stdio: ["ignore", "pipe", "pipe"],
    });
    server.stderr?.on("data", (b: Buffer) => {
      stderr += b.toString();
    });
    base = await new Promise<string>((resolve, reject) => {
      const lines = createInterface({ input: server.stdout! });
      lines.on("line", (line) => {
        const m = /^receiver-node listening on (http:\/\/127\.0\.0\.1:\d+)$/.exec(line);
        if (m) resolve(m[1]);
      });
      server.on("exit", (code) => reject(new Error(`server exited with ${code} before listening: ${stderr}`)));
    });
  });

  after(async () => {
    if (server && server.exitCode === null) {
      const exited = new Promise((resolve) => server.once("exit", resolve));
      server.kill("SIGTERM");
      await exited;
    }
    const c = new Client({ connectionString: databaseUrl });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.end();
  });

  let job = 0;
  // deliver posts a shipment.book delivery as idemgate sends it.
  async function deliver(
    tenant: string,
    orderId: string,
    token: number,
    { key = `shipment:${orderId}`, edit = () => {}, signer = new Webhook(secret) }: Options = {},
  ): Promise<Answer> {
    const jobId = `job_${++job}`;
    const body = JSON.stringify({
      type: "shipment.book",
      timestamp: new Date().toISOString(),
      job_id: jobId,
      tenant,
      business_key: key,
      attempt: 1,
      fencing_token: String(token),
      data: { order_id: orderId, quantity: 2 },
    });
    const now = new Date();
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "webhook-id": jobId,
      "webhook-timestamp": String(Math.floor(now.getTime() / 1000)),
      "webhook-signature": signer.sign(jobId, now, body),
      "idempotency-key": key,
      "idempotency-fencing-token": String(token),
      "idemgate-tenant": tenant,
      "idemgate-task": "shipment.book",
      "idemgate-attempt": "1",
    };
    edit(headers);
    const res = await fetch(`${base}/hooks/shipments`, { method: "POST", headers, body });
    return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
  }

  async function effects(): Promise<{ count: number; keys: Record<string, number> }> {
    const res = await fetch(`${base}/effects`);
    assert.equal(res.status, 200);
    return (await res.json()) as { count: number; keys: Record<string, number> };
  }

  test("a valid delivery books once and a repeat answers the same result_ref", async () => {
    const first = await deliver("acme", "o-1", 3);
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.match(String(first.body.result_ref), /^shp_node_\d+$/);

    const again = await deliver("acme", "o-1", 4);
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal(again.body.result_ref, first.body.result_ref);
    assert.equal(again.headers.get("idempotent-replayed"), "true");
    assert.equal((await effects()).keys["acme/shipment:o-1"], 1);
  });

  test("concurrent repeats apply once", async () => {
    const answers = await Promise.all(Array.from({ length: 10 }, () => deliver("acme", "o-2", 1)));
    for (const a of answers) {
      assert.equal(a.status, 200, JSON.stringify(a.body));
      assert.equal(a.body.result_ref, answers[0].body.result_ref);
    }
    assert.equal((await effects()).keys["acme/shipment:o-2"], 1);
  });

  test("a bad signature is 401 and applies nothing", async () => {
    const wrong = new Webhook(`whsec_${randomBytes(24).toString("base64")}`);
    const a = await deliver("acme", "o-3", 1, { signer: wrong });
    assert.equal(a.status, 401);
    const unsigned = await deliver("acme", "o-3", 1, {
      edit: (h) => {
        delete h["webhook-signature"];
      },
    });
    assert.equal(unsigned.status, 401);
    assert.equal((await effects()).keys["acme/shipment:o-3"], undefined);
  });

  test("headers that disagree with the body are 400", async () => {
    const a = await deliver("acme", "o-4", 1, {
      edit: (h) => {
        h["idempotency-key"] = "shipment:o-5";
      },
    });
    assert.equal(a.status, 400);
    assert.match(String(a.body.error), /Idempotency-Key/);
    assert.equal((await effects()).keys["acme/shipment:o-4"], undefined);
  });

  test("a stale fencing token is 409 with Idemgate-Stale and applies nothing", async () => {
    assert.equal((await deliver("acme", "o-6", 5)).status, 200);
    // Another job on the same order (the resource) whose attempt holds an
    // older token: a newer owner has already written.
    const stale = await deliver("acme", "o-6", 4, { key: "shipment:o-6#2" });
    assert.equal(stale.status, 409, JSON.stringify(stale.body));
    assert.equal(stale.headers.get("idemgate-stale"), "true");
    // The first job repeated with an older token is refused too.
    assert.equal((await deliver("acme", "o-6", 4)).status, 409);
    const equal = await deliver("acme", "o-6", 5, { key: "shipment:o-6#3" });
    assert.equal(equal.status, 200, "an equal token passes");
    const e = await effects();
    assert.equal(e.keys["acme/shipment:o-6"], 1);
    assert.equal(e.keys["acme/shipment:o-6#2"], undefined);
    assert.equal(e.keys["acme/shipment:o-6#3"], 1);
  });

  test("two tenants with the same key are two effects", async () => {
    const acme = await deliver("acme", "o-7", 1);
    const globex = await deliver("globex", "o-7", 1);
    assert.equal(acme.status, 200);
    assert.equal(globex.status, 200);
    assert.notEqual(acme.body.result_ref, globex.body.result_ref);
    const e = await effects();
    assert.equal(e.keys["acme/shipment:o-7"], 1);
    assert.equal(e.keys["globex/shipment:o-7"], 1);
  });

  test("a job enqueued without a tenant is accepted", async () => {
    const a = await deliver("", "o-8", 1);
    assert.equal(a.status, 200, JSON.stringify(a.body));
    assert.equal((await effects()).keys["/shipment:o-8"], 1);
  });
});
