export { Idemgate } from "./client.js";
export { IdemgateError, IdemgateProblem, IdemgateRedirectError, IdemgateTimeoutError, problemSlug } from "./errors.js";
export { encodeIdempotencyKey, newIdempotencyKey } from "./key.js";
export { defaultRetry, parseRetryAfter } from "./retry.js";
export type {
  BatchItem,
  BatchResult,
  BatchState,
  FieldError,
  IdemgateOptions,
  IdemgateResponse,
  Job,
  JobList,
  JobStatus,
  ListJobsOptions,
  ProblemDocument,
  PutScheduleResult,
  RequestOptions,
  RetryEvent,
  RetryOptions,
  Schedule,
  ScheduleFire,
  ScheduleList,
  ScheduleSpec,
  SubmitBatchOptions,
  SubmitJobOptions,
  WaitJobOptions,
} from "./types.js";
export type { ProblemResponse } from "./errors.js";
export type { components, operations, paths } from "./generated/api.js";
