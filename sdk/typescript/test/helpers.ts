// A scripted HTTP server playing the gateway, and a client whose waits are
// recorded instead of slept.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Idemgate, type IdemgateOptions } from "@idemgate/client";

export interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: Buffer;
}

export type Handler = (req: IncomingMessage, res: ServerResponse, body: Buffer, n: number) => void;

export interface TestServer {
  url: string;
  seen: Seen[];
  close: () => Promise<void>;
}

/** Starts a server on a random loopback port; handler answers the n-th request (1-based). */
export async function startServer(handler: Handler): Promise<TestServer> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
      handler(req, res, body, seen.length);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text), ...headers });
  res.end(text);
}

export const problemBase = "https://idemgate.dev/problems/";

/** Answers a problem document as the gateway does. */
export function problem(
  res: ServerResponse,
  status: number,
  slug: string,
  {
    headers = {},
    base = problemBase,
    errors,
    members = {},
  }: { headers?: Record<string, string>; base?: string; errors?: unknown[]; members?: Record<string, unknown> } = {},
): void {
  const doc: Record<string, unknown> = {
    type: base + slug,
    title: slug.replace(/-/g, " "),
    status,
    detail: `detail of ${slug}`,
    instance: "urn:uuid:01a2384e-26cb-7f2a-9944-c9c3269e0d37",
    request_id: `req-${slug}`,
    ...members,
  };
  if (errors) doc.errors = errors;
  const text = JSON.stringify(doc);
  res.writeHead(status, {
    "Content-Type": "application/problem+json",
    "Content-Length": Buffer.byteLength(text),
    "X-Request-Id": `req-${slug}`,
    ...headers,
  });
  res.end(text);
}

export interface FakeTime {
  sleeps: number[];
  now: () => number;
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** A clock that moves only when the client sleeps; every sleep is recorded. */
export function fakeTime(onSleep?: (ms: number, n: number) => void): FakeTime {
  let clock = 1_000_000;
  const sleeps: number[] = [];
  return {
    sleeps,
    now: () => clock,
    sleep: async (ms: number, signal?: AbortSignal) => {
      sleeps.push(ms);
      clock += ms;
      onSleep?.(ms, sleeps.length);
      signal?.throwIfAborted();
    },
  };
}

/** A client of url with recorded sleeps and a fixed jitter. */
export function client(url: string, time: FakeTime, options: Partial<IdemgateOptions> = {}): Idemgate {
  return new Idemgate({
    baseUrl: url,
    apiKey: "test-key",
    sleep: time.sleep,
    now: time.now,
    random: () => 0.5,
    ...options,
  });
}
