package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/idemgate/idemgate/openapi"
)

// FieldError is one fault of an invalid payload: the field's path
// (parcels[2].weight_g) and what is wrong with it.
type FieldError = openapi.FieldError

// ProblemError is a final 4xx or 5xx answer as an error, decoded from its
// RFC 9457 application/problem+json body (the gateway's Problem document).
// An answer that is not problem+json (an upstream's own error page)
// becomes a ProblemError too: Type "about:blank", Title the status text,
// Detail the start of the body.
type ProblemError struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Instance names the occurrence: urn:uuid: and the request id as a
	// UUID (the gateway's; an upstream's document may hold anything).
	Instance  string `json:"instance"`
	RequestID string `json:"request_id"`
	// Retryable says whether the same request, with the same key, may be
	// sent again as it is: the document's retryable member when it has
	// one, otherwise the status decides (408, 425, 429, 502, 503, 504, and
	// 409 idempotency-key-in-use).
	Retryable bool `json:"retryable"`
	// IdempotencyKey is the key the gateway read from the request, when
	// the problem concerns one.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Documentation links the section of the IETF Idempotency-Key draft
	// the problem is about (also the answer's Link rel="describedby").
	Documentation string       `json:"documentation,omitempty"`
	Errors        []FieldError `json:"errors,omitempty"`
}

// Slug is the last path segment of Type (idempotency-key-reused), which
// names the problem whatever problem_base the gateway is configured with.
func (p *ProblemError) Slug() string {
	t := strings.TrimRight(p.Type, "/")
	return t[strings.LastIndexByte(t, '/')+1:]
}

// Error says the status, the slug (or the title when the type is
// about:blank) and the detail.
func (p *ProblemError) Error() string {
	name := p.Slug()
	if p.Type == "" || p.Type == "about:blank" {
		name = p.Title
	}
	if name == "" {
		name = http.StatusText(p.Status)
	}
	s := fmt.Sprintf("idemgate: %d %s", p.Status, name)
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	return s
}

// The problem slugs a client acts on.
const (
	slugKeyInUse       = "idempotency-key-in-use"
	slugKeyReused      = "idempotency-key-reused"
	slugOutcomeUnknown = "idempotency-outcome-unknown"
	slugInvalidPayload = "invalid-payload"
)

// IsKeyReused reports whether err is a 422 idempotency-key-reused: the key
// was used before for a different request. Retrying cannot help; the
// caller has a bug or a key collision.
func IsKeyReused(err error) bool { return isSlug(err, slugKeyReused) }

// IsOutcomeUnknown reports whether err is a 409 idempotency-outcome-unknown:
// the gateway does not know whether the original request took effect and
// holds the key until an operator resolves it.
func IsOutcomeUnknown(err error) bool { return isSlug(err, slugOutcomeUnknown) }

// IsInvalidPayload reports whether err is a 422 invalid-payload; the
// ProblemError's Errors say which fields are at fault.
func IsInvalidPayload(err error) bool { return isSlug(err, slugInvalidPayload) }

func isSlug(err error, slug string) bool {
	var p *ProblemError
	return errors.As(err, &p) && p.Slug() == slug
}

// maxDetail bounds the Detail taken from a body that is not a problem.
const maxDetail = 200

// problemFrom reads a 4xx or 5xx answer as a ProblemError.
func problemFrom(status int, h http.Header, body []byte) *ProblemError {
	if mt, _, _ := mime.ParseMediaType(h.Get("Content-Type")); mt == "application/problem+json" {
		var p ProblemError
		var member struct {
			Retryable *bool `json:"retryable"`
		}
		if json.Unmarshal(body, &p) == nil && p.Type != "" {
			if p.Status == 0 {
				p.Status = status
			}
			if json.Unmarshal(body, &member) != nil || member.Retryable == nil {
				p.Retryable = retryableStatus(p.Status, p.Slug())
			}
			return &p
		}
	}
	detail := strings.TrimSpace(string(body))
	if !utf8.ValidString(detail) {
		detail = ""
	}
	if len(detail) > maxDetail {
		cut := maxDetail
		for cut > 0 && !utf8.RuneStart(detail[cut]) {
			cut--
		}
		detail = detail[:cut] + "…"
	}
	return &ProblemError{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail,
		Retryable: retryableStatus(status, "")}
}

// retryableStatus decides, for a document without a retryable member,
// whether an answer means "not processed, try again": the gateway released
// the key, or the original still runs.
func retryableStatus(status int, slug string) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return slug == slugKeyInUse
	}
	return false
}
