import { IdemgateError, IdemgateProblem, IdemgateRedirectError, IdemgateTimeoutError } from "./errors.js";
import { encodeIdempotencyKey, newIdempotencyKey } from "./key.js";
import { backoff, parseRetryAfter, resolveRetry, safeMethods, sleep } from "./retry.js";
import type {
  BatchItem,
  BatchResult,
  BatchState,
  IdemgateOptions,
  IdemgateResponse,
  Job,
  JobList,
  ListJobsOptions,
  PutScheduleResult,
  RequestOptions,
  RetryEvent,
  RetryOptions,
  Schedule,
  ScheduleList,
  ScheduleSpec,
  SubmitBatchOptions,
  SubmitJobOptions,
  WaitJobOptions,
} from "./types.js";

const encoder = new TextEncoder();

/**
 * A client of an idemgate gateway that retries safely: each logical call
 * draws one Idempotency-Key (or uses the business key it is given) and
 * sends it, with the same body bytes, on every attempt, so the gateway runs
 * the request once and replays its outcome to the retries.
 */
export class Idemgate {
  private readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly fetchFn: typeof fetch;
  private readonly retry: RetryOptions;
  private readonly attemptTimeoutMs: number | undefined;
  private readonly headers: Record<string, string>;
  private readonly sleepFn: (ms: number, signal?: AbortSignal) => Promise<void>;
  private readonly random: () => number;
  private readonly now: () => number;
  private readonly onRetry: ((event: RetryEvent) => void) | undefined;

  constructor(options: IdemgateOptions) {
    if (!options || typeof options.baseUrl !== "string" || options.baseUrl === "") {
      throw new TypeError("Idemgate: baseUrl is required");
    }
    const base = new URL(options.baseUrl); // throws on a malformed URL
    this.baseUrl = base.href.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.fetchFn = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.retry = resolveRetry(options.retry);
    this.attemptTimeoutMs = options.attemptTimeoutMs;
    this.headers = { ...options.headers };
    this.sleepFn = options.sleep ?? sleep;
    this.random = options.random ?? Math.random;
    this.now = options.now ?? Date.now;
    this.onRetry = options.onRetry;
  }

  /**
   * Sends one logical call and retries it until it has an answer that is
   * not "try again", or the policy or the signal stops it.
   *
   * `body`, when given, is serialised once with JSON.stringify (a
   * Uint8Array is sent as it is) and the same bytes go out on every
   * attempt. Retried: network errors, 408, 425, 429, 502, 503, 504 and 409
   * `idempotency-key-in-use`, waiting at least `Retry-After` when there is
   * one. Resolves for a status below 400 other than a redirect; rejects
   * with an IdemgateRedirectError for a 3xx naming a Location (never
   * followed, never retried), with an IdemgateProblem for a 4xx or 5xx,
   * with an IdemgateError when the last attempt found no answer, and with
   * `signal.reason` when the signal aborts.
   */
  async request<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    options: RequestOptions = {},
  ): Promise<IdemgateResponse<T>> {
    return this.send<T>(method, path, body, options);
  }

  /** request, with observe called before each wait between two attempts, after onRetry. */
  private async send<T>(
    method: string,
    path: string,
    body: unknown,
    options: RequestOptions,
    observe?: (event: RetryEvent) => void,
  ): Promise<IdemgateResponse<T>> {
    method = method.toUpperCase();
    const url = this.url(path);
    const policy = resolveRetry(this.retry, options.retry);
    const attemptTimeoutMs = options.attemptTimeoutMs ?? this.attemptTimeoutMs;
    const signal = options.signal;
    const idempotencyKey = safeMethods.has(method) ? undefined : (options.idempotencyKey ?? newIdempotencyKey());

    const headers = new Headers(this.headers);
    for (const [k, v] of Object.entries(options.headers ?? {})) headers.set(k, v);
    if (!headers.has("Accept")) headers.set("Accept", "application/json, application/problem+json");
    if (this.apiKey !== undefined) headers.set("Authorization", `Bearer ${this.apiKey}`);
    if (idempotencyKey !== undefined) headers.set("Idempotency-Key", encodeIdempotencyKey(idempotencyKey));
    else headers.delete("Idempotency-Key");

    let payload: Uint8Array<ArrayBuffer> | undefined; // the same bytes on every attempt
    if (body instanceof Uint8Array) {
      payload = new Uint8Array(body); // a copy: later changes by the caller do not reach a retry
      if (!headers.has("Content-Type")) headers.set("Content-Type", "application/octet-stream");
    } else if (body !== undefined) {
      const text = JSON.stringify(body);
      if (text === undefined) throw new TypeError("Idemgate: the body cannot be serialised as JSON");
      payload = encoder.encode(text);
      if (!headers.has("Content-Type")) headers.set("Content-Type", "application/json");
    }

    signal?.throwIfAborted();
    const started = this.now();
    for (let attempt = 1; ; attempt++) {
      let last: IdemgateError;
      let delay = backoff(attempt, policy, this.random);
      let status: number | undefined;
      const limit = attemptTimeoutMs === undefined ? undefined : withTimeout(signal, attemptTimeoutMs);
      try {
        const attemptSignal = limit?.signal ?? signal;
        // Never follow a redirect: it would carry the key, the body and the credentials elsewhere.
        const init: RequestInit = { method, headers, redirect: "manual" };
        if (payload !== undefined) init.body = payload;
        if (attemptSignal !== undefined) init.signal = attemptSignal;
        const fetchFn = this.fetchFn;
        const res = await fetchFn(url, init);
        if (res.type === "opaqueredirect" || (res.status >= 300 && res.status < 400 && res.headers.has("Location"))) {
          await res.body?.cancel();
          throw new IdemgateRedirectError(res.status, res.headers.get("Location") ?? "", { idempotencyKey, attempts: attempt });
        }
        const parsed = await readBody(res, method);
        const replayed = res.headers.get("Idempotent-Replayed")?.toLowerCase() === "true";
        if (res.status < 400) {
          return { status: res.status, headers: res.headers, body: parsed as T, replayed, idempotencyKey, attempts: attempt };
        }
        const retryAfterMs = parseRetryAfter(res.headers.get("Retry-After"));
        const problem = new IdemgateProblem(
          { status: res.status, statusText: res.statusText, headers: res.headers, body: parsed, replayed, idempotencyKey, attempts: attempt },
          retryAfterMs,
        );
        if (!retryable(problem)) throw problem;
        if (retryAfterMs !== undefined) delay = Math.max(delay, retryAfterMs);
        status = res.status;
        last = problem;
      } catch (err) {
        if (err instanceof IdemgateProblem || err instanceof IdemgateRedirectError) throw err;
        if (signal?.aborted) throw signal.reason;
        last = new IdemgateError(
          `${method} ${url}: no answer after ${attempt} attempt${attempt === 1 ? "" : "s"}: ${describe(err)}`,
          { cause: err, idempotencyKey, attempts: attempt },
        );
      } finally {
        limit?.dispose();
      }
      if (attempt >= policy.maxAttempts) throw last;
      if (this.now() - started + delay > policy.maxElapsedMs) throw last;
      const event: RetryEvent = { method, url, attempt, delayMs: delay, idempotencyKey, status, error: last };
      this.onRetry?.(event);
      observe?.(event);
      await this.sleepFn(delay, signal);
      signal?.throwIfAborted();
    }
  }

  /**
   * POSTs payload to an enqueue route and resolves to the job document of
   * its 202. Retrying with the same key (`options.idempotencyKey`) names
   * the same job. `delay` (seconds) or `notBefore` schedules it: the job
   * is `scheduled`, with `not_before`, until then; the schedule is part of
   * the request, so the same key with another schedule is refused.
   */
  async submitJob<P = unknown>(path: string, payload: P, options: SubmitJobOptions = {}): Promise<Job> {
    const { delay, notBefore, ...rest } = options;
    const res = await this.request<Job>("POST", path, payload, { ...rest, headers: { ...rest.headers, ...scheduleHeaders(delay, notBefore) } });
    if (res.status !== 202 || typeof res.body !== "object" || res.body === null) {
      throw new IdemgateError(`POST ${path}: expected 202 and a job document, got ${res.status}`, {
        idempotencyKey: res.idempotencyKey,
        attempts: res.attempts,
      });
    }
    return res.body;
  }

  /**
   * POSTs items to an enqueue route's batch path (`/v1/emails:batch`) under
   * the batch's key (`options.idempotencyKey`): a retry replays the whole
   * answer. Each item is answered as a single submit with its key would
   * be: `status` and `job`, or `problem`. With `atomic`, a failing item
   * rejects with an IdemgateProblem (`batch-refused`) and nothing is
   * recorded.
   */
  async submitBatch<P = unknown>(path: string, items: BatchItem<P>[], options: SubmitBatchOptions = {}): Promise<BatchResult> {
    const { atomic, ...rest } = options;
    const body = {
      items: items.map((it) => ({
        ...(it.idempotencyKey !== undefined ? { idempotency_key: it.idempotencyKey } : {}),
        body: it.payload,
        ...(it.delay !== undefined ? { delay: it.delay } : {}),
        ...(it.notBefore !== undefined
          ? { not_before: it.notBefore instanceof Date ? it.notBefore.toISOString() : it.notBefore }
          : {}),
      })),
      atomic: atomic ?? false,
    };
    const res = await this.request<BatchResult>("POST", path, body, rest);
    if (res.status !== 200 || typeof res.body !== "object" || res.body === null || !("batch_id" in res.body)) {
      throw new IdemgateError(`POST ${path}: expected 200 and a batch result, got ${res.status}`, {
        idempotencyKey: res.idempotencyKey,
        attempts: res.attempts,
      });
    }
    return res.body;
  }

  /** `GET /v1/batches/{id}`: the batch's jobs counted by status; with `waitSeconds`, held until they are all final. */
  async getBatch(id: string, options: { waitSeconds?: number; signal?: AbortSignal } = {}): Promise<BatchState> {
    const wait = options.waitSeconds ? `?wait=${Math.floor(options.waitSeconds)}` : "";
    const res = await this.request<BatchState>("GET", `/v1/batches/${encodeURIComponent(id)}${wait}`, undefined, { signal: options.signal });
    return res.body;
  }

  /** `GET /v1/jobs/{id}`: the job as it stands now. */
  async getJob(id: string, options: { signal?: AbortSignal } = {}): Promise<Job> {
    const res = await this.request<Job>("GET", `/v1/jobs/${encodeURIComponent(id)}`, undefined, options);
    return res.body;
  }

  /**
   * `GET /v1/jobs`, page after page: the tenant's jobs that `options`
   * selects, newest first, as an async iterator that reads the next page
   * only when the loop asks for more.
   *
   *     for await (const job of client.listJobs({ status: "failed" })) console.log(job.id, job.error);
   *
   * Paging is by keyset: jobs submitted while the loop runs are newer than
   * its first page and are not listed, and no job is listed twice or
   * skipped. A filter the gateway refuses rejects with a 400
   * IdemgateProblem whose `errors` name each wrong parameter. Each page is
   * one `request`, so a transient error is retried.
   */
  async *listJobs(options: ListJobsOptions = {}): AsyncGenerator<Job, void, undefined> {
    for await (const page of this.listJobPages(options)) yield* page.items;
  }

  /** `GET /v1/jobs` as `listJobs` reads it, a page at a time, each page with its `next_cursor`. */
  async *listJobPages(options: ListJobsOptions = {}): AsyncGenerator<JobList, void, undefined> {
    const { signal, cursor: first, ...filter } = options;
    const query = new URLSearchParams();
    if (filter.status !== undefined) query.set("status", filter.status);
    if (filter.task !== undefined) query.set("task", filter.task);
    if (filter.createdAfter !== undefined) query.set("created_after", timeParam(filter.createdAfter));
    if (filter.createdBefore !== undefined) query.set("created_before", timeParam(filter.createdBefore));
    if (filter.limit !== undefined) query.set("limit", String(filter.limit));
    let cursor = first;
    for (;;) {
      const q = new URLSearchParams(query);
      if (cursor !== undefined) q.set("cursor", cursor);
      const qs = q.toString();
      const path = qs === "" ? "/v1/jobs" : `/v1/jobs?${qs}`;
      const res = await this.request<JobList>("GET", path, undefined, { signal });
      const page = res.body;
      if (res.status !== 200 || typeof page !== "object" || page === null || !Array.isArray(page.items)) {
        throw new IdemgateError(`GET ${path}: expected 200 and a job list, got ${res.status}`, { attempts: res.attempts });
      }
      yield page;
      if (page.next_cursor === undefined) return;
      cursor = page.next_cursor;
    }
  }

  /**
   * `POST /v1/jobs/{id}/cancel`: cancels the job and resolves to its
   * document. `cancelled`: no attempt will start (or the job was already
   * cancelled); `cancelling`: an attempt is in flight and its end decides
   * between `succeeded` and `cancelled` (`waitJob` resolves to it). A job
   * that has succeeded or failed rejects with an IdemgateProblem whose
   * `isNotCancellable()` is true (409); an unknown job, or another
   * tenant's, with a 404 one. A cancel converges, so it is retried like
   * any call.
   */
  async cancelJob(id: string, options: { signal?: AbortSignal } = {}): Promise<Job> {
    const res = await this.request<Job>("POST", `/v1/jobs/${encodeURIComponent(id)}/cancel`, undefined, options);
    if ((res.status !== 200 && res.status !== 202) || typeof res.body !== "object" || res.body === null) {
      throw new IdemgateError(`cancel of job ${id}: expected 200 or 202 and a job document, got ${res.status}`, {
        attempts: res.attempts,
      });
    }
    return res.body;
  }

  /**
   * Waits until the job has ended (`succeeded`, `failed` or `cancelled`)
   * and resolves to it either way. Each call is a `GET /v1/jobs/{id}?wait=`
   * that the gateway holds until the job is final or its document changes
   * (`If-None-Match` with the last `ETag`), at most `waitSeconds` (the
   * gateway caps it at its `jobs_api.max_wait`; `timeoutMs` and
   * `attemptTimeoutMs` lower it). A gateway that does not hold (an older
   * one, or one without a database listener) answers at once with the
   * document unchanged: waitJob then polls with a growing pause, never
   * back to back. Rejects with an IdemgateTimeoutError after `timeoutMs`
   * (default 60000).
   */
  async waitJob(id: string, options: WaitJobOptions = {}): Promise<Job> {
    const { signal, timeoutMs = 60_000, minIntervalMs = 100, maxIntervalMs = 2_000, waitSeconds = 30 } = options;
    const path = `/v1/jobs/${encodeURIComponent(id)}`;
    const started = this.now();
    let last: Job | undefined;
    let etag: string | undefined;
    let polls = 0; // answers in a row the gateway gave at once, unchanged
    for (;;) {
      let secs = Math.min(waitSeconds, Math.floor((timeoutMs - (this.now() - started)) / 1000));
      // The answer must come before the attempt is given up.
      if (this.attemptTimeoutMs !== undefined) secs = Math.min(secs, Math.floor((this.attemptTimeoutMs - 5_000) / 1000));
      const query = secs > 0 ? `?wait=${secs}` : "";
      const request: RequestOptions = {};
      if (signal) request.signal = signal;
      if (etag !== undefined) request.headers = { "If-None-Match": etag };
      const sent = this.now();
      const res = await this.request<Job | undefined>("GET", path + query, undefined, request);
      let unchanged: boolean;
      if (res.status === 304 && last !== undefined && etag !== undefined) {
        unchanged = true;
      } else if (res.status === 200 && typeof res.body === "object" && res.body !== null) {
        // Without If-None-Match a gateway that holds answers a job that
        // has not ended only at the end of the wait.
        unchanged = etag === undefined || (last !== undefined && sameJob(res.body, last));
        last = res.body;
        etag = res.headers.get("ETag") ?? undefined;
      } else {
        throw new IdemgateError(`GET ${path}: expected 200 and a job document, got ${res.status}`, { attempts: res.attempts });
      }
      if (finalStatuses.has(last.status)) return last;
      const left = timeoutMs - (this.now() - started);
      if (left <= 0) {
        throw new IdemgateTimeoutError(`job ${id} is still ${last.status} after ${timeoutMs} ms`, last);
      }
      if (!unchanged || this.now() - sent >= heldAtLeastMs) {
        polls = 0; // the gateway held the GET, or the job moved
        continue;
      }
      polls++;
      const ceiling = Math.min(maxIntervalMs, minIntervalMs * 2 ** Math.min(polls - 1, 52));
      const pause = Math.floor(ceiling / 2 + (this.random() * ceiling) / 2);
      await this.sleepFn(Math.min(pause, left), signal);
      signal?.throwIfAborted();
    }
  }

  /**
   * `PUT /v1/schedules/{id}`: creates the tenant's schedule `id`
   * (`created` true, 201) or replaces it (`created` false, 200). A PUT
   * converges, so it is retried like any call. A declaration the gateway
   * refuses rejects with a 422 IdemgateProblem before anything is stored:
   * `invalid-payload` names each field at fault in `errors` (`cron`,
   * `every`, `timezone`, `body.…`); `isScheduleQuotaExceeded()` is true
   * when the tenant holds as many schedules as it may.
   */
  async putSchedule(id: string, spec: ScheduleSpec, options: { signal?: AbortSignal } = {}): Promise<PutScheduleResult> {
    const path = schedulePath(id);
    const res = await this.request<Schedule>("PUT", path, spec, options);
    const schedule = asSchedule(res, "PUT", path, [200, 201]);
    return { created: res.status === 201, schedule };
  }

  /** `GET /v1/schedules/{id}`: the schedule, with `last_fire` once a slot fired. An unknown id rejects with a 404 IdemgateProblem. */
  async getSchedule(id: string, options: { signal?: AbortSignal } = {}): Promise<Schedule> {
    const path = schedulePath(id);
    return asSchedule(await this.request<Schedule>("GET", path, undefined, options), "GET", path, [200]);
  }

  /** `GET /v1/schedules`: the tenant's schedules by id, those of the configuration (`source: "config"`) included. */
  async listSchedules(options: { signal?: AbortSignal } = {}): Promise<Schedule[]> {
    const path = "/v1/schedules";
    const res = await this.request<ScheduleList>("GET", path, undefined, options);
    const list = res.body;
    if (res.status !== 200 || typeof list !== "object" || list === null || !Array.isArray(list.schedules)) {
      throw new IdemgateError(`GET ${path}: expected 200 and a list of schedules, got ${res.status}`, { attempts: res.attempts });
    }
    return list.schedules;
  }

  /**
   * `DELETE /v1/schedules/{id}`: no slot fires after it; the jobs it fired
   * stay. An unknown id rejects with a 404 IdemgateProblem, unless an
   * earlier attempt of this call went unanswered: that attempt may have
   * deleted it, and the call resolves.
   */
  async deleteSchedule(id: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    const path = schedulePath(id);
    let unanswered = false;
    try {
      const res = await this.send("DELETE", path, undefined, options, (event) => {
        if (event.status === undefined) unanswered = true;
      });
      if (res.status !== 204 && res.status !== 200) {
        throw new IdemgateError(`DELETE ${path}: expected 204, got ${res.status}`, { attempts: res.attempts });
      }
    } catch (err) {
      if (unanswered && err instanceof IdemgateProblem && err.status === 404) return;
      throw err;
    }
  }

  /**
   * `POST /v1/schedules/{id}/pause`: resolves to the schedule, `paused`.
   * While paused, each slot is recorded as skipped. Pausing again changes
   * nothing.
   */
  async pauseSchedule(id: string, options: { signal?: AbortSignal } = {}): Promise<Schedule> {
    const path = `${schedulePath(id)}/pause`;
    return asSchedule(await this.request<Schedule>("POST", path, undefined, options), "POST", path, [200]);
  }

  /** `POST /v1/schedules/{id}/resume`: resolves to the schedule, not paused; the next slot fires, the skipped ones stay skipped. */
  async resumeSchedule(id: string, options: { signal?: AbortSignal } = {}): Promise<Schedule> {
    const path = `${schedulePath(id)}/resume`;
    return asSchedule(await this.request<Schedule>("POST", path, undefined, options), "POST", path, [200]);
  }

  /**
   * `POST /v1/schedules/{id}/trigger`: fires the schedule now, outside its
   * slots and whether or not it is paused, and resolves to the job of its
   * 202. The job id derives from the call's key (`options.idempotencyKey`,
   * or a new random one every attempt of this call shares): the same key
   * fires once and names the same job.
   */
  async triggerSchedule(id: string, options: RequestOptions = {}): Promise<Job> {
    const path = `${schedulePath(id)}/trigger`;
    const res = await this.request<Job>("POST", path, undefined, options);
    if (res.status !== 202 || typeof res.body !== "object" || res.body === null) {
      throw new IdemgateError(`POST ${path}: expected 202 and a job document, got ${res.status}`, {
        idempotencyKey: res.idempotencyKey,
        attempts: res.attempts,
      });
    }
    return res.body;
  }

  private url(path: string): string {
    if (/^https?:\/\//i.test(path)) return new URL(path).href;
    return this.baseUrl + (path.startsWith("/") ? path : `/${path}`);
  }

}

/**
 * The path of the schedule id. Its characters are percent-encoded but for
 * `:`, which a schedule id may hold and the gateway reads only as it is.
 */
function schedulePath(id: string): string {
  return `/v1/schedules/${encodeURIComponent(id).replace(/%3A/gi, ":")}`;
}

/** The schedule document of res, or an IdemgateError when res is not one with a status of want. */
function asSchedule(res: IdemgateResponse<Schedule>, method: string, path: string, want: number[]): Schedule {
  const s = res.body;
  if (!want.includes(res.status) || typeof s !== "object" || s === null || typeof s.id !== "string") {
    throw new IdemgateError(`${method} ${path}: expected ${want.join(" or ")} and a schedule, got ${res.status}`, {
      idempotencyKey: res.idempotencyKey,
      attempts: res.attempts,
    });
  }
  return s;
}

/** The statuses of a job that has ended. */
const finalStatuses = new Set<Job["status"]>(["succeeded", "failed", "cancelled"]);

/** An unchanged answer sooner than this was not held by the gateway. */
const heldAtLeastMs = 500;

/** Compares two documents of a job without their ETags (a gateway that sends none). */
function sameJob(a: Job, b: Job): boolean {
  return a.status === b.status && a.attempts === b.attempts && a.updated_at === b.updated_at;
}

function retryable(p: IdemgateProblem): boolean {
  if (p.replayed) return false; // a stored outcome does not change
  return p.retryable; // the document's retryable, or else its status
}

/**
 * A signal that aborts with the caller's signal or after ms, whichever
 * comes first; dispose clears the timer and the listener.
 */
function withTimeout(signal: AbortSignal | undefined, ms: number): { signal: AbortSignal; dispose: () => void } {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(new IdemgateError(`the attempt took longer than ${ms} ms`)), ms);
  const onAbort = (): void => ctl.abort(signal?.reason);
  if (signal?.aborted) onAbort();
  else signal?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: ctl.signal,
    dispose: () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    },
  };
}

/** A time as a list's query takes it: RFC 3339 (a string is sent as it is). */
function timeParam(t: Date | string): string {
  return typeof t === "string" ? t : t.toISOString();
}

async function readBody(res: Response, method: string): Promise<unknown> {
  if (method === "HEAD") return undefined;
  const text = await res.text();
  if (text === "") return undefined;
  const type = res.headers.get("Content-Type") ?? "";
  if (/[/+]json\b/i.test(type)) {
    try {
      return JSON.parse(text) as unknown;
    } catch {
      return text;
    }
  }
  return text;
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
    return `${err.message}${cause}`;
  }
  return String(err);
}

/** The schedule headers of submitJob's options. */
function scheduleHeaders(delay: number | undefined, notBefore: Date | string | undefined): Record<string, string> {
  if (delay !== undefined && notBefore !== undefined) {
    throw new TypeError("Idemgate: delay and notBefore exclude each other; give one");
  }
  if (delay !== undefined) {
    if (!Number.isFinite(delay)) throw new TypeError(`Idemgate: delay must be a finite number of seconds, not ${delay}`);
    return { "Idemgate-Delay": String(Math.max(0, Math.ceil(delay))) };
  }
  if (notBefore !== undefined) {
    const at = notBefore instanceof Date ? notBefore.toISOString() : notBefore;
    return { "Idemgate-Not-Before": at };
  }
  return {};
}
