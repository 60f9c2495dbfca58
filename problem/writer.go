package problem

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// DefaultBase prefixes problem type slugs when a Writer has no Base.
const DefaultBase = "https://idemgate.dev/problems/"

// Writer renders errors as application/problem+json (RFC 9457). Besides
// the RFC's members a document names its occurrence (instance), says
// whether the same request may be sent again (retryable), names the key
// it concerns (idempotency_key) and links the page that documents it
// (documentation, and Link rel="describedby"), so a generic client can act
// on it. The parts of the answer come from the error's *Error. An error no
// row of Table matches is a 500 whose detail says nothing of it.
type Writer struct {
	// Base prefixes the slugs. Defaults to DefaultBase.
	Base string
	// Table maps errors to problem types. A nil Table answers every
	// error with 500.
	Table Table
	// Occurrence names the request: its id (the document's request_id)
	// and the URI of this occurrence (instance). Nil means no request_id
	// and a fresh urn:uuid: as instance.
	Occurrence func(*http.Request) (requestID, instance string)
	// Key names the Idempotency-Key a problem concerns when its error
	// carries none (the key of the claim the request runs under). ok
	// false means the document has no idempotency_key. Nil means only
	// the error's Key is named.
	Key func(r *http.Request, err error) (key string, ok bool)
	// Logger receives the causes of 5xx answers, which their documents
	// do not show. Nil logs nothing.
	Logger *slog.Logger
	// Unexplained is the detail of a 5xx answer whose error carries none.
	// Defaults to "the server could not complete the request".
	Unexplained string
	// Challenge is the WWW-Authenticate header of a 401 whose handler did
	// not set its own. Empty means none.
	Challenge string
}

// document is the document a Writer writes. Its members and their order
// are the Problem schema of the gateway's OpenAPI description.
type document struct {
	Type           string       `json:"type"`
	Title          string       `json:"title"`
	Status         int          `json:"status"`
	Detail         string       `json:"detail"`
	Instance       string       `json:"instance"`
	RequestID      *string      `json:"request_id,omitempty"`
	Retryable      bool         `json:"retryable"`
	IdempotencyKey *string      `json:"idempotency_key,omitempty"`
	Documentation  string       `json:"documentation,omitempty"`
	Errors         []FieldFault `json:"errors,omitempty"`
}

// Write writes err as a problem document.
func (pw Writer) Write(w http.ResponseWriter, r *http.Request, err error) {
	p, known := pw.Table.Lookup(err)
	if !known {
		p = internalError
	}
	doc := document{Status: p.Status, Title: p.Title, Retryable: p.Retryable(), Documentation: p.Documentation()}
	doc.Type = pw.Base + p.Slug
	if pw.Base == "" {
		doc.Type = DefaultBase + p.Slug
	}
	var retryAfter time.Duration
	acceptEncoding := ""
	if e, ok := errors.AsType[*Error](err); ok {
		doc.Detail, doc.Errors, retryAfter, acceptEncoding = e.Detail, e.Fields, e.RetryAfter, e.AcceptEncoding
		if e.Key != "" {
			doc.IdempotencyKey = &e.Key
		}
	}
	if pw.Key != nil && doc.IdempotencyKey == nil {
		if key, ok := pw.Key(r, err); ok {
			doc.IdempotencyKey = &key
		}
	}
	id := ""
	if pw.Occurrence != nil {
		id, doc.Instance = pw.Occurrence(r)
		doc.RequestID = &id
	} else {
		doc.Instance = "urn:uuid:" + newUUIDv4()
	}
	if p.Status >= 500 {
		if !known || doc.Detail == "" {
			doc.Detail = pw.Unexplained
			if doc.Detail == "" {
				doc.Detail = "the server could not complete the request"
			}
		}
		if pw.Logger != nil {
			pw.Logger.ErrorContext(r.Context(), "request failed", "request_id", id,
				"method", r.Method, "path", r.URL.Path, "status", p.Status, "err", err)
		}
	}
	if doc.Detail == "" {
		doc.Detail = p.Title
	}
	b, _ := json.Marshal(doc)
	h := w.Header()
	SetRetryAfter(h, retryAfter)
	if acceptEncoding != "" {
		h.Set("Accept-Encoding", acceptEncoding)
	}
	if p.Status == http.StatusUnauthorized && pw.Challenge != "" && h.Get("WWW-Authenticate") == "" {
		h.Set("WWW-Authenticate", pw.Challenge)
	}
	SetDocumentationLink(h, doc.Documentation)
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Del("ETag")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}

// SetDocumentationLink sets the Link header of a problem whose
// documentation is url (RFC 8288, as the Idempotency-Key draft's error
// examples show it). An empty url sets nothing.
func SetDocumentationLink(h http.Header, url string) {
	if url != "" {
		h.Set("Link", "<"+url+`>; rel="describedby"; type="text/html"`)
	}
}

// SetRetryAfter sets Retry-After in whole seconds, rounded up. A d of zero
// or less sets nothing.
func SetRetryAfter(h http.Header, d time.Duration) {
	if d <= 0 {
		return
	}
	secs := int64((d + time.Second - 1) / time.Second)
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
}

// newUUIDv4 returns a random UUID (RFC 9562, version 4).
func newUUIDv4() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = 0x40 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	h := hex.EncodeToString(u[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
