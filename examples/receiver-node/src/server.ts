// receiver-node: a receiver of idemgate's HTTP-delivered shipment.book jobs,
// written without idemgate's code. The signature is checked by the
// standardwebhooks library; the effect is applied once per (tenant,
// Idempotency-Key) and fenced per (tenant, order) in PostgreSQL.
//
//   PORT=9300 DATABASE_URL=postgres://… WEBHOOK_SECRET=whsec_… [PGSCHEMA=s] node dist/server.js
//
// POST /hooks/shipments  a delivery: 200 {"result_ref"}, 401, 400, 409 + Idemgate-Stale, 413, 422
// GET  /effects          {"count": n, "keys": {"<tenant>/<key>": times applied}}
// GET  /healthz          200 once serving
import http from "node:http";
import { Pool } from "pg";
import { Webhook, WebhookVerificationError } from "standardwebhooks";
import { EnvelopeError, PayloadError, parseDelivery, parseShipment } from "./envelope";
import { book, effects, ensureSchema, StaleError } from "./store";

const maxBody = 1 << 20;

class TooLarge extends Error {}

function readBody(req: http.IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBody) {
        // Answered 413 with Connection: close; the rest is never read.
        req.pause();
        reject(new TooLarge(`body exceeds ${maxBody} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function send(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

export function createServer(pool: Pool, webhook: Webhook): http.Server {
  async function receive(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const raw = await readBody(req);
    const headers: Record<string, string> = {};
    for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"]) {
      const v = req.headers[name];
      if (typeof v === "string") {
        headers[name] = v;
      }
    }
    let body: unknown;
    try {
      body = webhook.verify(raw, headers);
    } catch (err) {
      if (err instanceof WebhookVerificationError) {
        return send(res, 401, { error: `signature: ${err.message}` });
      }
      throw new EnvelopeError("body is not JSON"); // verify parses the body once it trusts it
    }
    const d = parseDelivery(body, req.headers);
    const shipment = parseShipment(d.data);
    const applied = await book(pool, d, `order:${shipment.orderId}`, shipment);
    send(res, 200, { result_ref: applied.resultRef }, applied.replayed ? { "idempotent-replayed": "true" } : {});
  }

  return http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    let handled: Promise<void>;
    if (path === "/hooks/shipments" && req.method === "POST") {
      handled = receive(req, res);
    } else if (path === "/effects" && req.method === "GET") {
      handled = effects(pool).then((e) => send(res, 200, e));
    } else if (path === "/healthz" && req.method === "GET") {
      handled = Promise.resolve(send(res, 200, { ok: true }));
    } else {
      handled = Promise.resolve(send(res, 404, { error: "not found" }));
    }
    handled.catch((err: unknown) => {
      if (err instanceof StaleError) {
        return send(res, 409, { error: err.message }, { "idemgate-stale": "true" });
      }
      if (err instanceof EnvelopeError) {
        return send(res, 400, { error: `bad envelope: ${err.message}` });
      }
      if (err instanceof PayloadError) {
        return send(res, 422, { error: err.message });
      }
      if (err instanceof TooLarge) {
        return send(res, 413, { error: err.message }, { connection: "close" });
      }
      console.error("receiver-node: %s %s:", req.method, path, err);
      if (!res.headersSent) {
        send(res, 500, { error: "internal error" });
      } else {
        res.destroy();
      }
    });
  });
}

interface Config {
  port: number;
  databaseUrl: string;
  secret: string;
  schema?: string;
}

function config(env: NodeJS.ProcessEnv): Config {
  const problems: string[] = [];
  const port = Number(env.PORT ?? "9300");
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    problems.push(`PORT ${JSON.stringify(env.PORT)} is not a port`);
  }
  if (!env.DATABASE_URL) {
    problems.push("DATABASE_URL is not set");
  }
  if (!env.WEBHOOK_SECRET?.startsWith("whsec_")) {
    problems.push('WEBHOOK_SECRET is not set to "whsec_" + base64');
  }
  const schema = env.PGSCHEMA || undefined;
  if (schema !== undefined && !/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
    problems.push(`PGSCHEMA ${JSON.stringify(schema)} is not a lower-case identifier`);
  }
  if (problems.length > 0) {
    throw new Error(problems.join("; "));
  }
  return { port, databaseUrl: env.DATABASE_URL as string, secret: env.WEBHOOK_SECRET as string, schema };
}

async function main(): Promise<void> {
  let cfg: Config;
  let webhook: Webhook;
  try {
    cfg = config(process.env);
    webhook = new Webhook(cfg.secret);
  } catch (err) {
    console.error(`receiver-node: ${(err as Error).message}`);
    process.exit(2);
  }
  // search_path is set at connection start, so every pooled connection,
  // and every statement on it, uses the schema.
  const pool = new Pool({
    connectionString: cfg.databaseUrl,
    ...(cfg.schema ? { options: `-c search_path=${cfg.schema}` } : {}),
  });
  pool.on("error", (err) => console.error("receiver-node: idle connection:", err));
  if (cfg.schema) {
    await pool.query(`CREATE SCHEMA IF NOT EXISTS ${cfg.schema}`);
  }
  await ensureSchema(pool);

  const server = createServer(pool, webhook);
  server.listen(cfg.port, "127.0.0.1", () => {
    const addr = server.address();
    const port = typeof addr === "object" && addr ? addr.port : cfg.port;
    console.log(`receiver-node listening on http://127.0.0.1:${port}`);
  });
  const stop = () => {
    // In-flight deliveries finish and commit; the pool closes after them.
    server.close(() => {
      pool.end().finally(() => process.exit(0));
    });
    server.closeIdleConnections();
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error("receiver-node:", err);
    process.exit(1);
  });
}
