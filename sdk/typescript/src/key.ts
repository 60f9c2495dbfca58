/** A new random idempotency key: a version 4 UUID. */
export function newIdempotencyKey(): string {
  const c = globalThis.crypto;
  if (typeof c?.randomUUID === "function") return c.randomUUID();
  // randomUUID needs a secure context in browsers; getRandomValues does not.
  const b = c.getRandomValues(new Uint8Array(16));
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * The `Idempotency-Key` header value for key: an RFC 8941 sf-string, as
 * the IETF Idempotency-Key draft specifies, which the gateway accepts with
 * `key_syntax: strict` and `compat` alike (`"abc"` and `abc` are the same
 * key there).
 */
export function encodeIdempotencyKey(key: string): string {
  if (key.length === 0) throw new TypeError("idempotencyKey must not be empty");
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) {
      throw new TypeError(`idempotencyKey must be printable ASCII; character ${i} is not`);
    }
  }
  return `"${key.replace(/[\\"]/g, (m) => `\\${m}`)}"`;
}
