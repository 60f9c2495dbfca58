// The gateway's own documents, as openapi/openapi.yaml describes them
// (src/generated/api.ts is generated from it by `npm run generate`).
import type { components } from "./generated/api.js";

/** A job, as an enqueue route answers (202) and `GET /v1/jobs/{id}` shows it. */
export type Job = components["schemas"]["Job"];

/**
 * `scheduled`, `queued`, `processing`, `retrying`, `cancelling`, or one of
 * the final ones: `succeeded`, `failed`, `cancelled`.
 */
export type JobStatus = components["schemas"]["JobStatus"];

/** One page of `GET /v1/jobs`: its jobs, newest first, and `next_cursor` unless it is the last. */
export type JobList = components["schemas"]["JobList"];

/** An RFC 9457 problem document, as the gateway answers every error. */
export type ProblemDocument = components["schemas"]["Problem"];

/** One bad field of a job's payload (422 `invalid-payload`). */
export type FieldError = components["schemas"]["FieldError"];

/** How a logical call is retried. Every field has a default. */
export interface RetryOptions {
  /** Attempts in all, the first included (default 8). */
  maxAttempts: number;
  /** The backoff before the second attempt is drawn from [0, minBackoffMs) (default 100). */
  minBackoffMs: number;
  /** The backoff ceiling doubles from minBackoffMs up to this (default 10000). */
  maxBackoffMs: number;
  /**
   * No wait starts that would end more than this long after the call began
   * (default 60000). An attempt in flight is not cut short: bound it with
   * `attemptTimeoutMs` or an AbortSignal.
   */
  maxElapsedMs: number;
}

/** What a retry is about to wait for; passed to `onRetry`. */
export interface RetryEvent {
  method: string;
  url: string;
  /** The attempt that just failed (1 for the first). */
  attempt: number;
  /** How long the client waits before the next attempt. */
  delayMs: number;
  /** The key every attempt carries; undefined for GET and HEAD. */
  idempotencyKey: string | undefined;
  /** The status that was answered, or undefined for a network error. */
  status?: number;
  /** The problem answered, or the network error. */
  error: unknown;
}

export interface IdemgateOptions {
  /** The gateway's public address, e.g. `https://api.example.com`; a path prefix is kept. */
  baseUrl: string;
  /** The tenant's API key, sent as `Authorization: Bearer <key>`. */
  apiKey?: string;
  /** A fetch implementation (default: the global `fetch`). */
  fetch?: typeof fetch;
  /** Retry policy; missing fields take their defaults. */
  retry?: Partial<RetryOptions>;
  /** Per-attempt time limit in ms; an attempt that runs longer is abandoned and retried. Default: none. */
  attemptTimeoutMs?: number;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
  /** Waits ms, rejecting with `signal.reason` when the signal aborts. Injectable for tests. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** A number in [0, 1) for the jitter (default Math.random). Injectable for tests. */
  random?: () => number;
  /** The clock, in ms, that `maxElapsedMs` and `waitJob`'s timeout are measured on (default Date.now). */
  now?: () => number;
  /** Called before each wait between two attempts. */
  onRetry?: (event: RetryEvent) => void;
}

export interface RequestOptions {
  /**
   * The key of this logical call. Give a business key (`order-42`) to make
   * calls from different processes one operation; by default a new random
   * UUID is drawn for each call. Ignored for GET, HEAD and OPTIONS.
   */
  idempotencyKey?: string;
  /** Aborts the attempt in flight and stops retrying; the call rejects with `signal.reason`. */
  signal?: AbortSignal;
  /** Headers for this call only. */
  headers?: Record<string, string>;
  /** Overrides the client's retry policy for this call. */
  retry?: Partial<RetryOptions>;
  /** Overrides the client's per-attempt time limit for this call. */
  attemptTimeoutMs?: number;
}

export interface SubmitJobOptions extends RequestOptions {
  /**
   * Run the job this many seconds after the gateway records it
   * (`Idemgate-Delay`; rounded up to a whole second, a negative one is 0).
   * `0` runs it at once even when its task has a default delay. Excludes
   * `notBefore`.
   */
  delay?: number;
  /**
   * Run the job at this time (`Idemgate-Not-Before`, sent as RFC 3339); a
   * time already past runs it at once. A string must be RFC 3339 with an
   * offset. Excludes `delay`.
   */
  notBefore?: Date | string;
}

export interface IdemgateResponse<T = unknown> {
  status: number;
  headers: Headers;
  /** The JSON body parsed, the text for any other media type, undefined when empty. */
  body: T;
  /** True when the gateway replayed a stored outcome (`Idempotent-Replayed: true`). */
  replayed: boolean;
  /** The key every attempt carried; undefined for GET, HEAD and OPTIONS. */
  idempotencyKey: string | undefined;
  /** Attempts made, this one included. */
  attempts: number;
}

/** Which of the tenant's jobs `listJobs` and `listJobPages` list; every field is optional. */
export interface ListJobsOptions {
  /** Only jobs in this status, as the job document shows it (a scheduled job whose time has come is `queued`). */
  status?: JobStatus;
  /** Only jobs of this task. */
  task?: string;
  /** Only jobs created strictly after this time (a string must be RFC 3339 with an offset). */
  createdAfter?: Date | string;
  /** Only jobs created strictly before this time (a string must be RFC 3339 with an offset). */
  createdBefore?: Date | string;
  /** The most jobs a page holds, 1 to 500 (default the gateway's, 50). */
  limit?: number;
  /** Start after this cursor (a page's `next_cursor`); none starts at the newest job. */
  cursor?: string;
  /** Stops listing; the iteration rejects with `signal.reason`. */
  signal?: AbortSignal;
}

export interface WaitJobOptions {
  /** Give up (IdemgateTimeoutError) after this long (default 60000; Infinity waits for ever). */
  timeoutMs?: number;
  /** Stops waiting; the call rejects with `signal.reason`. */
  signal?: AbortSignal;
  /** The first pause between two polls (default 100). */
  minIntervalMs?: number;
  /** The longest pause between two polls (default 2000). */
  maxIntervalMs?: number;
  /**
   * The longest the gateway is asked to hold one GET (`?wait=`, whole
   * seconds; default 30; 0 polls). The gateway caps it at its `jobs_api.max_wait`.
   */
  waitSeconds?: number;
}

/** The answer of a batch path: each item's status and job or problem. */
export type BatchResult = components["schemas"]["BatchResult"];

/** A batch's jobs counted by status (`GET /v1/batches/{id}`). */
export type BatchState = components["schemas"]["BatchState"];

/** One job of a batch: the payload a single submit would post, under its own key. */
export interface BatchItem<P = unknown> {
  /** The item's Idempotency-Key in the route's scope; without it, the batch's key, a colon and its index. */
  idempotencyKey?: string;
  /** The job's payload. */
  payload: P;
  /** Seconds before the job runs, as submitJob's `delay`. */
  delay?: number;
  /** When the job runs, as submitJob's `notBefore`; excludes `delay`. */
  notBefore?: Date | string;
}

export interface SubmitBatchOptions extends RequestOptions {
  /** Any failing item refuses the whole batch (422 `batch-refused`) and nothing is recorded. */
  atomic?: boolean;
}

/** A recurring schedule, as `GET /v1/schedules/{id}` shows it: its timing, body, policies, next slots and `last_fire`. */
export type Schedule = components["schemas"]["Schedule"];

/** One fired slot of a schedule: the slot, the job it fired and the job's status. */
export type ScheduleFire = components["schemas"]["ScheduleFire"];

/** The answer of `GET /v1/schedules`. */
export type ScheduleList = components["schemas"]["ScheduleList"];

type ScheduleDeclaration = components["schemas"]["ScheduleDeclaration"];

/**
 * What `putSchedule` sends: `task`, `body`, and exactly one of `cron` and
 * `every`. `timezone` defaults to UTC, `overlap` to `skip` and `catchup`
 * to `none`.
 */
export type ScheduleSpec = Omit<ScheduleDeclaration, "timezone" | "overlap" | "catchup"> &
  Partial<Pick<ScheduleDeclaration, "timezone" | "overlap" | "catchup">>;

/** The answer of `putSchedule`: whether the PUT created the schedule (201) or replaced it (200), and the schedule. */
export interface PutScheduleResult {
  created: boolean;
  schedule: Schedule;
}
