package job

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/idemgate/idemgate/ijson"
	"github.com/idemgate/idemgate/problem"
)

// Payload is a decoded, valid job payload and the identity it forms.
type Payload struct {
	// Data is the decoded JSON, numbers as json.Number.
	Data any
	// BusinessKey is the rendered Spec.BusinessKey.
	BusinessKey string
	// Resource is the rendered Spec.Resource; "" when the Spec has none.
	Resource string
}

// FieldError names one fault of a payload. Field is the field's path,
// dotted with array indices in brackets (items[2].sku); "" is the whole
// body.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ErrMalformed: the body is not one JSON value, or not one every reader
// takes alike (I-JSON, RFC 7493) and PostgreSQL can store.
var ErrMalformed = errors.New("malformed payload")

// ErrInvalid: the body is JSON but breaks the job's schema, or cannot
// form its business key or resource.
var ErrInvalid = errors.New("invalid payload")

// PayloadError carries the faults of a payload; it wraps ErrMalformed or
// ErrInvalid.
type PayloadError struct {
	Kind   error
	Fields []FieldError
}

func (e *PayloadError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Message
		if f.Field != "" {
			parts[i] = f.Field + ": " + f.Message
		}
	}
	return e.Kind.Error() + ": " + strings.Join(parts, "; ")
}

func (e *PayloadError) Unwrap() error { return e.Kind }

// Faults returns the faults as the error carrier lists them
// (problem.Error's Fields), for the answer that refuses the payload.
func (e *PayloadError) Faults() []problem.FieldFault {
	out := make([]problem.FieldFault, len(e.Fields))
	for i, f := range e.Fields {
		out[i] = problem.FieldFault(f)
	}
	return out
}

// Canonical returns the canonical form of a JSON document: object keys
// sorted, no insignificant white space, numbers as written (10.50 stays
// 10.50). Two payloads of one business key are the same request when
// their canonical forms are equal. The error wraps ErrMalformed; a
// document that is not I-JSON has no one canonical form and is refused.
func Canonical(body []byte) ([]byte, error) {
	v, err := ijson.Decode(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if err := ijson.Check(body); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	var buf bytes.Buffer
	buf.Grow(len(body))
	ijson.WriteCanonical(&buf, v)
	return buf.Bytes(), nil
}
