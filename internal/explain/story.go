package explain

import (
	"time"
)

// Story is everything known about one job or key. Its JSON form is the
// document of `idemgate explain --json` and of the admin endpoints.
type Story struct {
	// Record is the idempotency record, nil when there is none (expired,
	// deleted, or a job enqueued without one).
	Record *Record `json:"record"`
	// Claims are the record's claims, oldest first. ClaimLedger says why
	// there are none when the store keeps no claim ledger.
	Claims      []Claim `json:"claims"`
	ClaimLedger string  `json:"claim_ledger,omitempty"`
	// Job is the job the key created, nil for a proxied key.
	Job *Job `json:"job"`
	// Execution is the job's execution state by business key.
	Execution *Execution `json:"execution,omitempty"`
	// Attempts is the attempt ledger of the job's business key.
	Attempts []Attempt `json:"attempts"`
	// Effects are the effects that carry the job's business key.
	Effects []Effect `json:"effects"`
	// Verdict is the story in one line; Violation says it breaks a
	// promise (the CLI then exits 1).
	Verdict   string `json:"verdict"`
	Violation bool   `json:"violation"`

	// effectsKnown: Effects come from the business tables, so none means
	// the effect is missing.
	effectsKnown bool
}

// Record is an idempotency record as explain shows it.
type Record struct {
	Tenant       string     `json:"tenant"`
	Route        string     `json:"route"`
	Key          string     `json:"key"`
	State        string     `json:"state"`
	Fingerprint  string     `json:"fingerprint"`
	Status       *int       `json:"status"` // the stored answer's status
	FencingToken int64      `json:"fencing_token"`
	LeaseUntil   *time.Time `json:"lease_until"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	ExpiresAt    time.Time  `json:"expires_at"`
}

// Claim is one claim of an idempotency record (the claim ledger).
type Claim struct {
	FencingToken int64      `json:"fencing_token"`
	Instance     string     `json:"instance"`
	ClaimedAt    time.Time  `json:"claimed_at"`
	EndedAt      *time.Time `json:"ended_at"`
	// Outcome: completed, released, unknown, taken_over, refused,
	// resolved, deleted; "" while the claim holds.
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	Status  *int   `json:"status,omitempty"`
}

// Job is the job row.
type Job struct {
	ID             string    `json:"id"`
	Tenant         string    `json:"tenant"`
	Route          string    `json:"route"`
	IdempotencyKey string    `json:"idempotency_key"`
	Task           string    `json:"task"`
	Queue          string    `json:"queue"`
	BusinessKey    string    `json:"business_key"`
	Status         string    `json:"status"`
	Attempts       int       `json:"attempts"`
	ResultRef      *string   `json:"result_ref"`
	Error          *string   `json:"error"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	// TaskState is where the queue holds the job's task ("pending",
	// "retry", …; "missing" when it has none), when it was looked up.
	TaskState string `json:"task_state,omitempty"`
}

// Execution is the execution state of the job's business key.
type Execution struct {
	Status       string `json:"status"`
	Attempts     int    `json:"attempts"`
	FencingToken int64  `json:"fencing_token"`
	ResultRef    string `json:"result_ref"`
	LastError    string `json:"last_error"`
}

// Attempt is one row of the attempt ledger.
type Attempt struct {
	Attempt      int        `json:"attempt"`
	FencingToken *int64     `json:"fencing_token"` // null for lock_busy
	Outcome      string     `json:"outcome"`       // "" while it runs
	StartedAt    time.Time  `json:"started_at"`
	EndedAt      *time.Time `json:"ended_at"`
	Error        string     `json:"error"`
	Worker       string     `json:"worker"`
	JobID        string     `json:"job_id"`
}

// Effect is one effect that carries the business key: a business row of
// a Go handler, or a receiver's answer to an HTTP delivery.
type Effect struct {
	Kind      string     `json:"kind"`
	Ref       string     `json:"ref"`
	WrittenAt *time.Time `json:"written_at,omitempty"`
	Detail    string     `json:"detail,omitempty"`
}
