// The delivery envelope idemgate posts, checked against its headers. The
// body is what is signed; the headers are what proxies and logs read, so a
// delivery whose headers disagree with its body is refused.
import type { IncomingHttpHeaders } from "node:http";

export interface Delivery {
  type: string;
  jobId: string;
  tenant: string;
  businessKey: string;
  attempt: number;
  // A decimal string, as on the wire: a fencing token may exceed 2^53.
  fencingToken: string;
  data: unknown;
}

export interface Shipment {
  orderId: string;
  quantity: number;
}

// EnvelopeError is a malformed delivery: 400, never retried.
export class EnvelopeError extends Error {}

// PayloadError is a well-formed delivery whose data can never book: 422.
export class PayloadError extends Error {}

// parseDelivery reads the verified body (already JSON-parsed by the
// signature check) and checks it against the headers.
export function parseDelivery(body: unknown, headers: IncomingHttpHeaders): Delivery {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new EnvelopeError("body is not a JSON object");
  }
  const b = body as Record<string, unknown>;
  const missing = ["type", "job_id", "business_key"].filter((f) => typeof b[f] !== "string" || b[f] === "");
  if (missing.length > 0) {
    throw new EnvelopeError(`missing ${missing.join(", ")}`);
  }
  // "" for a job enqueued without a tenant.
  if (b.tenant !== undefined && typeof b.tenant !== "string") {
    throw new EnvelopeError("tenant is not a string");
  }
  const fencingToken = token(b.fencing_token, "fencing_token");
  const d: Delivery = {
    type: b.type as string,
    jobId: b.job_id as string,
    tenant: (b.tenant as string | undefined) ?? "",
    businessKey: b.business_key as string,
    attempt: typeof b.attempt === "number" ? b.attempt : 0,
    fencingToken,
    data: b.data,
  };

  const problems: string[] = [];
  const key = header(headers, "idempotency-key");
  if (key !== d.businessKey) {
    problems.push(`Idempotency-Key ${JSON.stringify(key)} is not business_key ${JSON.stringify(d.businessKey)}`);
  }
  const tenant = header(headers, "idemgate-tenant");
  if (tenant !== d.tenant) {
    problems.push(`Idemgate-Tenant ${JSON.stringify(tenant)} is not tenant ${JSON.stringify(d.tenant)}`);
  }
  const headerToken = header(headers, "idempotency-fencing-token");
  let sameToken = false;
  try {
    sameToken = token(headerToken, "Idempotency-Fencing-Token") === d.fencingToken;
  } catch {
    sameToken = false;
  }
  if (!sameToken) {
    problems.push(`Idempotency-Fencing-Token ${JSON.stringify(headerToken)} is not fencing_token ${d.fencingToken}`);
  }
  if (problems.length > 0) {
    throw new EnvelopeError(problems.join("; "));
  }
  return d;
}

// token normalises a fencing token to its decimal string; absent is "0"
// (a job declared without a resource carries none).
function token(v: unknown, name: string): string {
  if (v === undefined || v === null || v === "") {
    return "0";
  }
  if (typeof v !== "string" || !/^[0-9]{1,19}$/.test(v) || BigInt(v) > 9223372036854775807n) {
    throw new EnvelopeError(`${name} ${JSON.stringify(v)} is not a non-negative 64-bit integer`);
  }
  return BigInt(v).toString();
}

function header(headers: IncomingHttpHeaders, name: string): string {
  const v = headers[name];
  return Array.isArray(v) ? v.join(", ") : (v ?? "");
}

// parseShipment reads the shipment.book payload.
export function parseShipment(data: unknown): Shipment {
  const d = (typeof data === "object" && data !== null ? data : {}) as Record<string, unknown>;
  const problems: string[] = [];
  if (typeof d.order_id !== "string" || d.order_id === "") {
    problems.push("order_id is required");
  }
  if (typeof d.quantity !== "number" || !Number.isSafeInteger(d.quantity) || d.quantity <= 0) {
    problems.push(`quantity ${JSON.stringify(d.quantity)} is not a positive integer`);
  }
  if (problems.length > 0) {
    throw new PayloadError(`shipment payload: ${problems.join("; ")}`);
  }
  return { orderId: d.order_id as string, quantity: d.quantity as number };
}
