package receiver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers idemgate sends with every delivery besides the webhook ones.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderFencingToken   = "Idempotency-Fencing-Token"
	HeaderTenant         = "Idemgate-Tenant"
	// HeaderStale marks a 409 that refuses a superseded attempt, so the
	// sender stops instead of dead-lettering the job.
	HeaderStale = "Idemgate-Stale"
)

// DefaultMaxBytes bounds a delivery body when Read is given no bound.
const DefaultMaxBytes = 1 << 20

// ErrEnvelope is what every malformed or inconsistent delivery matches.
var ErrEnvelope = errors.New("receiver: bad delivery envelope")

// Delivery is one delivered job: the JSON envelope idemgate posts.
type Delivery struct {
	// Type is the task, e.g. "shipment.book".
	Type      string
	Timestamp time.Time
	// JobID is the same on every attempt of the job.
	JobID string
	// Tenant is the tenant that submitted the job, "" for a job enqueued
	// without one.
	Tenant string
	// BusinessKey is the job's key within its tenant, also sent as
	// Idempotency-Key; (Tenant, BusinessKey) names the effect.
	BusinessKey string
	Attempt     int
	// FencingToken grows each time a worker takes the job's resource; 0
	// when the job declares no resource.
	FencingToken int64
	// Data is the job's payload as submitted.
	Data json.RawMessage
}

// envelope is the wire form; fencing_token is a decimal string so that
// JavaScript receivers read it without losing precision.
type envelope struct {
	Type         string          `json:"type"`
	Timestamp    time.Time       `json:"timestamp"`
	JobID        string          `json:"job_id"`
	Tenant       string          `json:"tenant"`
	BusinessKey  string          `json:"business_key"`
	Attempt      int             `json:"attempt"`
	FencingToken json.RawMessage `json:"fencing_token"`
	Data         json.RawMessage `json:"data"`
}

// Read reads r's body (at most maxBytes, DefaultMaxBytes when maxBytes <=
// 0), verifies its signature with v, parses the envelope and checks that
// the Idempotency-Key, Idemgate-Tenant and Idempotency-Fencing-Token headers
// agree with it. Its errors match a Verify error, ErrEnvelope, or wrap an
// *http.MaxBytesError for a body over the bound.
func Read(r *http.Request, v *Verifier, maxBytes int64) (Delivery, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return Delivery{}, fmt.Errorf("%w: %w", ErrEnvelope, err)
		}
		return Delivery{}, fmt.Errorf("receiver: read body: %w", err)
	}
	if err := v.Verify(r.Header, body); err != nil {
		return Delivery{}, err
	}
	d, err := parse(body)
	if err != nil {
		return Delivery{}, err
	}
	if err := crossCheck(r.Header, d); err != nil {
		return Delivery{}, err
	}
	return d, nil
}

func parse(body []byte) (Delivery, error) {
	var e envelope
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&e); err != nil {
		return Delivery{}, fmt.Errorf("%w: %w", ErrEnvelope, err)
	}
	if dec.More() {
		return Delivery{}, fmt.Errorf("%w: data after the JSON object", ErrEnvelope)
	}
	token, err := parseToken(e.FencingToken)
	if err != nil {
		return Delivery{}, err
	}
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"type", e.Type}, {"job_id", e.JobID}, {"business_key", e.BusinessKey},
	} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return Delivery{}, fmt.Errorf("%w: missing %s", ErrEnvelope, strings.Join(missing, ", "))
	}
	return Delivery{
		Type:         e.Type,
		Timestamp:    e.Timestamp,
		JobID:        e.JobID,
		Tenant:       e.Tenant,
		BusinessKey:  e.BusinessKey,
		Attempt:      e.Attempt,
		FencingToken: token,
		Data:         e.Data,
	}, nil
}

// parseToken reads fencing_token: a decimal string by the contract; an
// absent one (a job without a resource) is 0. A bare number is accepted
// too, as a sender in a language with 64-bit integers may write one.
func parseToken(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	s := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("%w: fencing_token: %w", ErrEnvelope, err)
		}
		if s == "" {
			return 0, nil
		}
	}
	token, err := strconv.ParseInt(s, 10, 64)
	if err != nil || token < 0 {
		return 0, fmt.Errorf("%w: fencing_token %s is not a non-negative integer", ErrEnvelope, raw)
	}
	return token, nil
}

// crossCheck refuses a delivery whose headers disagree with its signed
// body. The body is what is signed; the headers are what proxies, logs and
// generic idempotency layers read, so a mismatch means something in between
// is broken and neither can be trusted.
func crossCheck(h http.Header, d Delivery) error {
	var problems []string
	if got := h.Get(HeaderIdempotencyKey); got != d.BusinessKey {
		problems = append(problems, fmt.Sprintf("%s %q is not business_key %q", HeaderIdempotencyKey, got, d.BusinessKey))
	}
	if got := h.Get(HeaderTenant); got != d.Tenant {
		problems = append(problems, fmt.Sprintf("%s %q is not tenant %q", HeaderTenant, got, d.Tenant))
	}
	if got := h.Get(HeaderFencingToken); got != "" || d.FencingToken != 0 {
		if token, err := strconv.ParseInt(got, 10, 64); err != nil || token != d.FencingToken {
			problems = append(problems, fmt.Sprintf("%s %q is not fencing_token %d", HeaderFencingToken, got, d.FencingToken))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrEnvelope, strings.Join(problems, "; "))
	}
	return nil
}
