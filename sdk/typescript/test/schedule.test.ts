// submitJob's schedule options: the gateway's headers on every attempt.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Job } from "@idemgate/client";
import { client, fakeTime, json, problem, startServer } from "./helpers.js";

const scheduled: Job = {
  id: "job_0123456789abcdef0123456789abcdef",
  task: "shipment.book",
  status: "scheduled",
  attempts: 0,
  result_ref: null,
  error: null,
  created_at: "2026-12-03T08:00:00Z",
  updated_at: "2026-12-03T08:00:00Z",
  not_before: "2026-12-03T10:00:00Z",
};

describe("schedules", () => {
  for (const [name, options, header, want] of [
    ["a delay", { delay: 7200 }, "idemgate-delay", "7200"],
    ["a delay rounded up", { delay: 1.5 }, "idemgate-delay", "2"],
    ["a negative delay runs at once", { delay: -3 }, "idemgate-delay", "0"],
    ["a Date", { notBefore: new Date("2026-12-05T07:00:00Z") }, "idemgate-not-before", "2026-12-05T07:00:00.000Z"],
    ["an RFC 3339 string", { notBefore: "2026-12-05T08:00:00+01:00" }, "idemgate-not-before", "2026-12-05T08:00:00+01:00"],
  ] as const) {
    test(`${name}: ${header} on every attempt`, async () => {
      const s = await startServer((_req, res, _body, n) => {
        if (n === 1) problem(res, 503, "queue-unavailable");
        else json(res, 202, scheduled, { Location: `/v1/jobs/${scheduled.id}` });
      });
      try {
        const job = await client(s.url, fakeTime()).submitJob("/v1/shipments", { order_id: "o-1", quantity: 1 }, { ...options });
        assert.equal(job.status, "scheduled");
        assert.equal(job.not_before, scheduled.not_before);
        assert.equal(s.seen.length, 2);
        for (const r of s.seen) assert.equal(r.headers[header], want);
      } finally {
        await s.close();
      }
    });
  }

  test("delay and notBefore exclude each other", async () => {
    await assert.rejects(
      client("http://127.0.0.1:9", fakeTime()).submitJob("/v1/shipments", {}, { delay: 1, notBefore: new Date() }),
      TypeError,
    );
  });
});
