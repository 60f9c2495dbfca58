package job

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/ijson"
)

// Spec is one declared job: what the gateway validates and the worker
// runs.
type Spec struct {
	// Task is the asynq task type, [a-z0-9_.:-]+, unique.
	Task string
	// Queue the job goes to unless its route names another. Default
	// DefaultQueue.
	Queue string
	// Schema is the compiled JSON Schema of the payload. Required: a nil
	// Schema accepts any JSON value.
	Schema *Schema
	// BusinessKey forms the job's identity from its payload: the same key
	// (within a tenant) is one effect. Required.
	BusinessKey Template
	// Resource forms the entity the worker locks and fences on; the zero
	// Template means none.
	Resource Template
	// MaxAttempts counts real attempts; 0 means the worker's default.
	MaxAttempts int
	// HTTP delivers the job to a receiver; nil means a Go handler
	// registered in code runs it.
	HTTP *HTTP
	// Delay is how long after it is recorded a job runs when its request
	// gives no schedule. Default 0: at once.
	Delay time.Duration
	// MaxDelay bounds how far ahead a request may schedule the job
	// (CheckSchedule). Default DefaultMaxDelay, 720h.
	MaxDelay time.Duration
	// Limits are the flow limits every attempt of the job takes, all or
	// none, before it starts (limit.go). Default none.
	Limits []FlowLimitUse
	// OnFinal, when set, POSTs one signed event per final status the job
	// reaches; nil means none.
	OnFinal *Callback
	// Fairness names the pool (FairPool) the job's tasks wait in, shared
	// fairly between tenants; "" means none: the task goes to asynq at
	// once.
	Fairness string
	// Priority is the job's tier in its pool: a higher tier is dispatched
	// first, whatever the tenants' shares. Default 0.
	Priority int
	// Debounce, when set, folds the submits under one debounce key into
	// one pending job (debounce.go); nil means every submit is a job.
	Debounce *Debounce
}

// DefaultQueue is the queue of a job that names none.
const DefaultQueue = "default"

// NewSpec builds the Spec of a job declared in code rather than in a
// configuration file: it compiles schema (JSON Schema 2020-12, the
// document as JSON) and parses the business key and resource templates
// (resource "" for none). The job goes to DefaultQueue.
func NewSpec(task string, schema []byte, businessKey, resource string) (*Spec, error) {
	s := &Spec{Task: task, Queue: DefaultQueue}
	var err error
	if s.Schema, err = CompileSchema(schema, task); err != nil {
		return nil, err
	}
	if s.BusinessKey, err = ParseTemplate(businessKey); err != nil {
		return nil, fmt.Errorf("%s: business key: %w", task, err)
	}
	if resource != "" {
		if s.Resource, err = ParseTemplate(resource); err != nil {
			return nil, fmt.Errorf("%s: resource: %w", task, err)
		}
	}
	return s, nil
}

// HTTP is a job's deliver.http: where and how the worker POSTs it.
type HTTP struct {
	// URL is the absolute http(s) URL of the receiver.
	URL string
	// Secrets are the base64-decoded keys of "whsec_<base64>" secrets.
	// Every one signs each delivery, so that a receiver keeps verifying
	// while a secret rotates.
	Secrets [][]byte
	// Timeout bounds one attempt. Default 30s.
	Timeout time.Duration
	// Headers are static headers added to every delivery.
	Headers map[string]string
}

// DefaultTimeout bounds one HTTP delivery attempt when HTTP.Timeout is 0.
const DefaultTimeout = 30 * time.Second

// Decode checks body against the schema and renders the templates. The
// error is a *PayloadError wrapping ErrMalformed when body is not one JSON
// value, or one that is not I-JSON or that PostgreSQL cannot store (the
// gateway answers 400), or ErrInvalid when the payload breaks the schema
// or cannot form the business key, the resource or a flow limit's key
// (422), with one FieldError per fault. A key cannot be formed from a
// field that is missing, or not a string, number or boolean, or that
// holds a control character; nor can a business key or resource longer
// than MaxKeyBytes, or an empty business key.
func (s *Spec) Decode(body []byte) (Payload, error) { return s.decode(body, 0) }

// decode is Decode with a bound on the body's nesting (Request.MaxDepth;
// 0 is ijson's own). The bound is checked first, by the scan that checks
// I-JSON, so a body nested past it is refused before it is decoded.
func (s *Spec) decode(body []byte, maxDepth int) (Payload, error) {
	checked := ijson.CheckDepth(body, maxDepth)
	var je *ijson.Error
	if errors.Is(checked, ijson.ErrTooDeep) && errors.As(checked, &je) {
		return Payload{}, &PayloadError{Kind: ErrInvalid, Fields: []FieldError{{Field: "",
			Message: fmt.Sprintf("arrays and objects nest deeper than the %d levels a payload may have (byte %d)", maxDepth, je.Offset)}}}
	}
	data, err := ijson.Decode(body)
	if err != nil {
		return Payload{}, &PayloadError{Kind: ErrMalformed, Fields: []FieldError{{Field: "", Message: err.Error()}}}
	}
	if faults := unstorable(checked, data); len(faults) > 0 {
		return Payload{}, &PayloadError{Kind: ErrMalformed, Fields: faults}
	}
	if s.Schema == nil {
		// Nothing to check against; the templates still must render.
	} else if errs := s.Schema.Validate(data); len(errs) > 0 {
		return Payload{}, &PayloadError{Kind: ErrInvalid, Fields: errs}
	}
	p := Payload{Data: data}
	var faults []FieldError
	p.BusinessKey, faults = renderKey("business key", s.BusinessKey, data, MaxKeyBytes, faults)
	if fields := s.BusinessKey.Fields(); p.BusinessKey == "" && len(faults) == 0 && len(fields) > 0 {
		// Only a template of one field and no literal renders "".
		faults = append(faults, FieldError{Field: fields[0], Message: "is empty: it forms the job's business key"})
	}
	if !s.Resource.IsZero() {
		p.Resource, faults = renderKey("resource", s.Resource, data, MaxKeyBytes, faults)
	}
	for _, u := range s.Limits {
		faults = u.faults(data, faults)
	}
	if s.Debounce != nil {
		faults = s.Debounce.faults(data, faults)
	}
	if len(faults) > 0 {
		return Payload{}, &PayloadError{Kind: ErrInvalid, Fields: sortFields(faults)}
	}
	return p, nil
}

// render renders t, adding a fault for each field that cannot render (not
// only the first, so a client fixes them all at once).
func render(t Template, data any, faults []FieldError) (string, []FieldError) {
	out, err := t.Render(data)
	if err == nil {
		return out, faults
	}
	for _, p := range t.parts {
		if p.path == nil {
			continue
		}
		if _, err := renderField(data, p.path); err != nil {
			faults = append(faults, fieldError(err))
		}
	}
	return "", faults
}

func fieldError(err error) FieldError {
	var re *renderError
	if errors.As(err, &re) {
		return FieldError{Field: re.field, Message: re.message}
	}
	return FieldError{Field: "", Message: err.Error()}
}
