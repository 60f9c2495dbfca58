import type { RetryOptions } from "./types.js";

/** The retry policy's defaults. */
export const defaultRetry: Readonly<RetryOptions> = Object.freeze({
  maxAttempts: 8,
  minBackoffMs: 100,
  maxBackoffMs: 10_000,
  maxElapsedMs: 60_000,
});

/** Methods that carry no Idempotency-Key: they change nothing, so any attempt may repeat. */
export const safeMethods: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * Statuses that mean "not processed, try again" when the answer does not
 * say (a problem document without `retryable`, or no problem document):
 * 408, 425, 429, 502, 503, 504. A 409 is retried only when it is the
 * gateway's `idempotency-key-in-use`.
 */
export const retryableStatuses: ReadonlySet<number> = new Set([408, 425, 429, 502, 503, 504]);

export function resolveRetry(...layers: (Partial<RetryOptions> | undefined)[]): RetryOptions {
  const out: RetryOptions = { ...defaultRetry };
  for (const layer of layers) {
    if (!layer) continue;
    for (const k of ["maxAttempts", "minBackoffMs", "maxBackoffMs", "maxElapsedMs"] as const) {
      const v = layer[k];
      if (v !== undefined) out[k] = v;
    }
  }
  if (!Number.isInteger(out.maxAttempts) || out.maxAttempts < 1) {
    throw new RangeError(`retry.maxAttempts must be an integer >= 1, got ${out.maxAttempts}`);
  }
  for (const k of ["minBackoffMs", "maxBackoffMs", "maxElapsedMs"] as const) {
    if (typeof out[k] !== "number" || Number.isNaN(out[k]) || out[k] < 0) {
      throw new RangeError(`retry.${k} must be a number >= 0, got ${out[k]}`);
    }
  }
  return out;
}

/**
 * Exponential backoff with full jitter: a wait drawn from
 * [0, min(maxBackoffMs, minBackoffMs * 2^(attempt-1))).
 */
export function backoff(attempt: number, policy: RetryOptions, random: () => number): number {
  const ceiling = Math.min(policy.maxBackoffMs, policy.minBackoffMs * 2 ** Math.min(attempt - 1, 52));
  return Math.floor(random() * ceiling);
}

/** `Retry-After` (delay-seconds or an HTTP-date) in ms, or undefined. */
export function parseRetryAfter(value: string | null, nowMs: number = Date.now()): number | undefined {
  if (value === null) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}

/** Waits ms; rejects with the signal's reason when it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
