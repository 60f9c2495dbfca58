import { retryableStatuses } from "./retry.js";
import type { FieldError, Job, ProblemDocument } from "./types.js";

interface ErrorDetails {
  cause?: unknown;
  idempotencyKey?: string | undefined;
  attempts?: number;
}

/** Every error this package throws, other than an aborted signal's reason. */
export class IdemgateError extends Error {
  /** The key every attempt carried; undefined for GET, HEAD and OPTIONS. */
  readonly idempotencyKey: string | undefined;
  /** Attempts made before giving up (0 when none was sent). */
  readonly attempts: number;

  constructor(message: string, details: ErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = "IdemgateError";
    this.idempotencyKey = details.idempotencyKey;
    this.attempts = details.attempts ?? 0;
  }
}

/** `waitJob` gave up before the job finished. */
export class IdemgateTimeoutError extends IdemgateError {
  /** The job as last seen. */
  readonly job: Job | undefined;

  constructor(message: string, job: Job | undefined) {
    super(message);
    this.name = "IdemgateTimeoutError";
    this.job = job;
  }
}

/**
 * A 3xx answer naming another location. The client never follows a
 * redirect (fetch is called with `redirect: "manual"`): following would
 * send the API key, the body and the Idempotency-Key wherever `Location`
 * points, and that host's answer would come back as the gateway's. It is
 * final, not retried.
 */
export class IdemgateRedirectError extends IdemgateError {
  /** The redirect's status; 0 where fetch hides it (a browser's opaque redirect). */
  readonly status: number;
  /** The `Location` header as sent; empty where fetch hides it. */
  readonly location: string;

  constructor(status: number, location: string, details: ErrorDetails = {}) {
    const where = location === "" ? "elsewhere" : `to ${location}`;
    super(`${status === 0 ? "a" : status} redirect ${where} not followed: fix the base URL`, details);
    this.name = "IdemgateRedirectError";
    this.status = status;
    this.location = location;
  }
}

/** An answered response the client does not retry (or no longer retries). */
export interface ProblemResponse {
  status: number;
  statusText: string;
  headers: Headers;
  body: unknown;
  replayed: boolean;
  idempotencyKey: string | undefined;
  attempts: number;
}

/**
 * An error status (4xx, 5xx) as an RFC 9457 problem. Gateway errors carry
 * the gateway's document; any other error answer (an upstream's own 4xx,
 * replayed or not) is described as `about:blank` with its status, and its
 * body is in `body`.
 */
export class IdemgateProblem extends IdemgateError {
  /** The problem type: the gateway's `problem_base` followed by a slug. */
  readonly type: string;
  readonly title: string;
  /** The HTTP status of the response. */
  readonly status: number;
  readonly detail: string;
  /** The occurrence: `urn:uuid:` and the request id as a UUID. */
  readonly instance: string;
  /** The id of the request that produced the document (also `X-Request-Id`). */
  readonly request_id: string;
  /**
   * Whether the same request, with the same key, may be sent again as it
   * is: the document's `retryable` when it has one, otherwise decided from
   * the status (408, 425, 429, 502, 503, 504, and 409
   * `idempotency-key-in-use`).
   */
  readonly retryable: boolean;
  /** The `Idempotency-Key` the gateway read from the request, when the problem concerns one. */
  readonly idempotency_key: string | undefined;
  /** The section of the IETF Idempotency-Key draft the problem is about (also `Link: rel="describedby"`). */
  readonly documentation: string | undefined;
  /** For `invalid-payload` and `bad-request`: each field at fault; otherwise empty. */
  readonly errors: FieldError[];
  readonly headers: Headers;
  /** The response body as parsed. */
  readonly body: unknown;
  /** True when this is a replayed, stored outcome. */
  readonly replayed: boolean;
  /** `Retry-After` in ms, when the response had one. */
  readonly retryAfterMs: number | undefined;

  constructor(response: ProblemResponse, retryAfterMs?: number) {
    const isProblem = /\bproblem\+json\b/i.test(response.headers.get("Content-Type") ?? "");
    const doc = isProblem ? asProblem(response.body) : undefined;
    const status = response.status;
    const type = doc?.type ?? "about:blank";
    const title = doc?.title ?? (response.statusText || `HTTP ${status}`);
    const detail = doc?.detail ?? summary(response.body);
    super(detail ? `${status} ${title}: ${detail}` : `${status} ${title}`, {
      idempotencyKey: response.idempotencyKey,
      attempts: response.attempts,
    });
    this.name = "IdemgateProblem";
    this.type = type;
    this.title = title;
    this.status = status;
    this.detail = detail;
    this.instance = doc?.instance ?? "";
    this.request_id = doc?.request_id ?? response.headers.get("X-Request-Id") ?? "";
    this.retryable = doc?.retryable ?? retryableByStatus(status, problemSlug(type));
    this.idempotency_key = doc?.idempotency_key;
    this.documentation = doc?.documentation;
    this.errors = Array.isArray(doc?.errors) ? doc.errors : [];
    this.headers = response.headers;
    this.body = response.body;
    this.replayed = response.replayed;
    this.retryAfterMs = retryAfterMs;
  }

  /**
   * The last segment of `type` (`idempotency-key-reused`), whatever the
   * gateway's `problem_base`; `about:blank` for an answer that is not a
   * problem document.
   */
  get slug(): string {
    return problemSlug(this.type);
  }

  /** True when the problem's slug is `slug`. */
  is(slug: string): boolean {
    return this.slug === slug;
  }

  /** 422: the same key was sent before with another request. Use a new key. */
  isKeyReused(): boolean {
    return this.is("idempotency-key-reused");
  }

  /** 409: the original request with this key still runs (retried by the client). */
  isKeyInUse(): boolean {
    return this.is("idempotency-key-in-use");
  }

  /** 409: the original's outcome is unknown and held for an operator. */
  isOutcomeUnknown(): boolean {
    return this.is("idempotency-outcome-unknown");
  }

  /** 409: the job has already succeeded or failed; a cancel cannot undo it. */
  isNotCancellable(): boolean {
    return this.is("job-not-cancellable");
  }

  /** 422: the job's payload breaks its schema; see `errors`. */
  isInvalidPayload(): boolean {
    return this.is("invalid-payload");
  }

  /** 422: the tenant holds as many schedules as it may (`jobs_api.schedules.max_per_tenant`); delete one first. */
  isScheduleQuotaExceeded(): boolean {
    return this.is("schedule-quota-exceeded");
  }

  /** 429: the tenant's rate limit (retried by the client after `Retry-After`). */
  isRateLimited(): boolean {
    return this.is("rate-limited");
  }
}

/** Whether a status means "not processed, try again", for a document that does not say. */
function retryableByStatus(status: number, slug: string): boolean {
  if (retryableStatuses.has(status)) return true;
  return status === 409 && slug === "idempotency-key-in-use";
}

/** The last segment of a problem type URI (path, URN or fragment). */
export function problemSlug(type: string): string {
  if (type === "about:blank") return type;
  const bare = type.replace(/[?].*$/, "");
  const parts = bare.split(/[/:#]/).filter((p) => p !== "");
  return parts.length > 0 ? parts[parts.length - 1]! : "";
}

function asProblem(body: unknown): Partial<ProblemDocument> | undefined {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return undefined;
  const doc = body as Record<string, unknown>;
  if (typeof doc.type !== "string" || typeof doc.title !== "string") return undefined;
  const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
  const out: Partial<ProblemDocument> = { type: doc.type, title: doc.title };
  const detail = str(doc.detail);
  if (detail !== undefined) out.detail = detail;
  const instance = str(doc.instance);
  if (instance !== undefined) out.instance = instance;
  const requestId = str(doc.request_id);
  if (requestId !== undefined) out.request_id = requestId;
  if (typeof doc.retryable === "boolean") out.retryable = doc.retryable;
  const key = str(doc.idempotency_key);
  if (key !== undefined) out.idempotency_key = key;
  const documentation = str(doc.documentation);
  if (documentation !== undefined) out.documentation = documentation;
  if (Array.isArray(doc.errors)) {
    out.errors = doc.errors.filter(
      (e): e is FieldError =>
        typeof e === "object" && e !== null && typeof e.field === "string" && typeof e.message === "string",
    );
  }
  return out;
}

function summary(body: unknown): string {
  if (body === undefined) return "";
  const text = typeof body === "string" ? body : JSON.stringify(body);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}
