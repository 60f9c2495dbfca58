package telemetry

// The worker's series, exposed on worker.admin_listen /metrics.
const (
	MetricLockAcquire       = "idemgate_lock_acquire_total"
	MetricLockRenewals      = "idemgate_lock_renewals_total"
	MetricLockLost          = "idemgate_lock_lost_total"
	MetricFencingRejections = "idemgate_fencing_rejections_total"
	MetricJobs              = "idemgate_jobs_total"
	MetricJobAttempts       = "idemgate_job_attempts_total"
	MetricJobReplays        = "idemgate_job_replays_total"
	MetricRecordRetries     = "idemgate_job_record_retries_total"
	MetricDLQTasks          = "idemgate_dlq_tasks"
	MetricQueueDepth        = "idemgate_queue_depth"
)

// The gateway's series (package gateway registers them), exposed on
// admin_listen /metrics.
const (
	MetricRequests               = "idemgate_requests_total"
	MetricRequestDuration        = "idemgate_request_duration_seconds"
	MetricUpstreamDuration       = "idemgate_upstream_duration_seconds"
	MetricStoreOperationDuration = "idemgate_store_operation_duration_seconds"
	// The memory store's fill, exported with store: memory only.
	MetricMemoryStoreBytes    = "idemgate_memory_store_bytes"
	MetricMemoryStoreMaxBytes = "idemgate_memory_store_max_bytes"
	MetricMemoryStoreRefusals = "idemgate_memory_store_refusals_total"
	// The admin listeners' refused requests, the worker's too.
	MetricAdminAuthFailures = "idemgate_admin_auth_failures_total"
)

// MetricNames returns every series name idemgate exposes, gateway and
// worker, with the _bucket, _sum and _count series of each histogram:
// the names a dashboard or an alert may select. They are a public
// interface; deploy/grafana and deploy/prometheus use only these.
func MetricNames() []string {
	names := []string{
		MetricRequests,
		MetricMemoryStoreBytes, MetricMemoryStoreMaxBytes, MetricMemoryStoreRefusals,
		MetricAdminAuthFailures,
		MetricLockAcquire, MetricLockRenewals, MetricLockLost, MetricFencingRejections,
		MetricJobs, MetricJobAttempts, MetricJobReplays, MetricRecordRetries,
		MetricDLQTasks, MetricQueueDepth,
		MetricLimitWaits, MetricLimitHolders,
		MetricPauseBounces, MetricBreakerOpen, MetricBreakersOpen,
		MetricRetentionDeleted, MetricFinalCallbacks,
		MetricFairDispatch,
	}
	for _, h := range []string{MetricRequestDuration, MetricUpstreamDuration, MetricStoreOperationDuration, MetricLimitWait, MetricFairDwell} {
		names = append(names, h+"_bucket", h+"_sum", h+"_count")
	}
	return names
}
