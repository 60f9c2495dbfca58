package enqueue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Task kinds: stable strings on the wire, never Go type names.
const (
	TaskInvoiceCreate    = "invoice.create"
	TaskInventoryAdjust  = "inventory.adjust"
	TaskPaymentCharge    = "payment.charge"
	TaskNotificationSend = "notification.send"
)

// Payload is a task's body. BusinessKey is the job's identity (never an
// attempt id): the same business key is one effect. Resource is the entity
// the worker serialises on.
type Payload interface {
	Validate() []FieldError
	BusinessKey() string
	Resource() string
}

// InvoiceCreate creates the one invoice of an order.
type InvoiceCreate struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

func (p InvoiceCreate) BusinessKey() string { return "invoice:" + p.OrderID }
func (p InvoiceCreate) Resource() string    { return "order:" + p.OrderID }
func (p InvoiceCreate) Validate() []FieldError {
	var v validator
	v.id("order_id", p.OrderID)
	v.positive("amount_cents", p.AmountCents)
	v.currency("currency", p.Currency)
	return v.errs
}

// InventoryAdjust applies one stock movement, once per adjustment id.
type InventoryAdjust struct {
	AdjustmentID string `json:"adjustment_id"`
	SKU          string `json:"sku"`
	Delta        int64  `json:"delta"`
}

func (p InventoryAdjust) BusinessKey() string { return "inventory:" + p.AdjustmentID }
func (p InventoryAdjust) Resource() string    { return "sku:" + p.SKU }
func (p InventoryAdjust) Validate() []FieldError {
	var v validator
	v.id("adjustment_id", p.AdjustmentID)
	v.id("sku", p.SKU)
	if p.Delta == 0 {
		v.add("delta", "must not be zero")
	}
	return v.errs
}

// PaymentCharge charges a payment at the partner, once.
type PaymentCharge struct {
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

func (p PaymentCharge) BusinessKey() string { return "payment:" + p.PaymentID }
func (p PaymentCharge) Resource() string    { return "payment:" + p.PaymentID }
func (p PaymentCharge) Validate() []FieldError {
	var v validator
	v.id("payment_id", p.PaymentID)
	v.positive("amount_cents", p.AmountCents)
	v.currency("currency", p.Currency)
	return v.errs
}

// NotificationSend sends one message per (template, user, event).
type NotificationSend struct {
	EventID  string `json:"event_id"`
	UserID   string `json:"user_id"`
	Template string `json:"template"`
}

func (p NotificationSend) BusinessKey() string {
	return "email:" + p.Template + ":" + p.UserID + ":" + p.EventID
}
func (p NotificationSend) Resource() string { return "user:" + p.UserID }
func (p NotificationSend) Validate() []FieldError {
	var v validator
	v.id("event_id", p.EventID)
	v.id("user_id", p.UserID)
	v.id("template", p.Template)
	return v.errs
}

// FieldError names one bad field of a payload.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ErrMalformed: the body is not a JSON object of the task's shape.
var ErrMalformed = errors.New("malformed payload")

// ErrInvalid: the body parsed but some fields are wrong.
var ErrInvalid = errors.New("invalid payload")

// PayloadError carries the fields at fault; it wraps ErrMalformed or
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

// Decode parses and validates the body of a task of the given kind.
func Decode(kind string, body []byte) (Payload, error) {
	switch kind {
	case TaskInvoiceCreate:
		return decode[InvoiceCreate](body)
	case TaskInventoryAdjust:
		return decode[InventoryAdjust](body)
	case TaskPaymentCharge:
		return decode[PaymentCharge](body)
	case TaskNotificationSend:
		return decode[NotificationSend](body)
	}
	return nil, fmt.Errorf("enqueue: unknown task %q", kind)
}

// Known reports whether kind is a task this build runs.
func Known(kind string) bool {
	switch kind {
	case TaskInvoiceCreate, TaskInventoryAdjust, TaskPaymentCharge, TaskNotificationSend:
		return true
	}
	return false
}

func decode[T Payload](body []byte) (Payload, error) {
	var p T
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, &PayloadError{Kind: ErrMalformed, Fields: []FieldError{malformed(err)}}
	}
	if dec.More() {
		return nil, &PayloadError{Kind: ErrMalformed, Fields: []FieldError{{Field: "", Message: "the body must hold one JSON object"}}}
	}
	if errs := p.Validate(); len(errs) > 0 {
		return nil, &PayloadError{Kind: ErrInvalid, Fields: errs}
	}
	return p, nil
}

func malformed(err error) FieldError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return FieldError{Field: te.Field, Message: "must be a JSON " + jsonType(te.Type.Kind())}
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return FieldError{Field: strings.Trim(f, `"`), Message: "is not a field of this task"}
	}
	return FieldError{Field: "", Message: "the body is not valid JSON: " + strings.TrimPrefix(msg, "json: ")}
}

// jsonType names a Go kind the way a client writing JSON thinks of it.
func jsonType(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return "object"
}

type validator struct{ errs []FieldError }

func (v *validator) add(field, msg string) { v.errs = append(v.errs, FieldError{field, msg}) }

func (v *validator) id(field, s string) {
	switch {
	case s == "":
		v.add(field, "is required")
	case len(s) > 128:
		v.add(field, "must be at most 128 characters")
	case strings.ContainsAny(s, ": \t\r\n"):
		v.add(field, "must not contain ':' or white space")
	}
}

func (v *validator) positive(field string, n int64) {
	if n <= 0 {
		v.add(field, "must be a positive integer")
	}
}

func (v *validator) currency(field, s string) {
	if len(s) != 3 || strings.ToUpper(s) != s || strings.ContainsAny(s, "0123456789 ") {
		v.add(field, "must be a three-letter ISO 4217 code like EUR")
	}
}
