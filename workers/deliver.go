package workers

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/propagation"
	"golang.org/x/net/http/httpguts"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/workers/fence"
)

// HTTPDelivery configures delivery of a job to an HTTP endpoint: the job is
// POSTed as a Standard Webhooks message, and the receiver's answer decides
// the job's fate.
type HTTPDelivery struct {
	// URL is the absolute http or https URL the job is POSTed to. Required.
	URL string
	// Secrets are the raw HMAC keys (the base64-decoded part of a "whsec_"
	// secret). Each one signs the message, so while a secret rotates the
	// receiver can verify with either the old or the new one. With none,
	// no webhook-signature header is sent.
	Secrets [][]byte
	// Timeout bounds one attempt, answer included. Default 30s.
	Timeout time.Duration
	// Headers are static headers added to every delivery (an API key). They
	// cannot replace a header of the delivery protocol.
	Headers map[string]string
	// Client sends the request. Default: a client on
	// http.DefaultTransport. Redirects are never followed, whatever the
	// client's CheckRedirect: the signed message was meant for URL, and a
	// 3xx is a configuration mistake that fails the job.
	Client *http.Client
	// MaxResponseBytes is how much of the answer is read. Default 64 KiB.
	MaxResponseBytes int64
	// MaxRetryAfter bounds the delay a Retry-After answer can ask for, so a
	// receiver cannot park a job for days. Default 1h. It may exceed
	// Backoff.Max: the receiver knows when it will be back.
	MaxRetryAfter time.Duration
	// Now is the clock of webhook-timestamp and of an HTTP-date
	// Retry-After. Default time.Now.
	Now func() time.Time
}

// Defaults for HTTPDelivery.
const (
	DefaultDeliveryTimeout          = 30 * time.Second
	DefaultDeliveryMaxResponseBytes = 64 << 10
	DefaultDeliveryMaxRetryAfter    = time.Hour
)

// Headers of the delivery protocol.
const (
	// The Standard Webhooks ones.
	headerWebhookID        = "webhook-id"
	headerWebhookTimestamp = "webhook-timestamp"
	headerWebhookSignature = "webhook-signature"

	headerIdempotencyKey = "Idempotency-Key"
	headerFencingToken   = "Idempotency-Fencing-Token"
	headerTenant         = "Idemgate-Tenant"
	headerTask           = "Idemgate-Task"
	headerAttempt        = "Idemgate-Attempt"
	// headerStale, "true" on a 409, says the receiver has applied a newer
	// fencing token for the resource: this attempt was superseded.
	headerStale = "Idemgate-Stale"
)

// maxErrorBody is how much of an answer's body an error message quotes.
const maxErrorBody = 256

// Deliver returns the business function that POSTs a job to d.URL. Use it
// with Handle:
//
//	workers.Handle(deps, "shipment.book", key, resource, workers.Deliver(d))
//
// The body is
//
//	{"type", "timestamp", "job_id", "tenant", "business_key", "attempt", "fencing_token", "data"}
//
// with data the task's payload as submitted, and the request carries the
// Standard Webhooks headers (webhook-id is the job id, the same on every
// attempt), Idempotency-Key (the business key), Idempotency-Fencing-Token,
// Idemgate-Tenant, Idemgate-Task, Idemgate-Attempt and, when ctx carries a
// span, traceparent. The call runs under ctx, which Handle cancels when the
// job's lock is lost, and under d.Timeout.
//
// The answer decides:
//
//   - 2xx: success. The result reference is the JSON body's string
//     "result_ref", else the Location header, else "http:<status>" (the
//     receiver gave none, but the job's record says what it answered).
//   - 408, 425, 429, 502, 503, 504, no answer, a timeout, a connection
//     error: the receiver is unavailable (Unavailable), retried with
//     backoff without counting the attempt, however long it lasts;
//   - 500 and any other 5xx: a transient error, retried with backoff and
//     counted, so a receiver that fails on this job dead-letters it after
//     MaxAttempts;
//   - either way, with a Retry-After the error is a *RetryAfterError, so
//     the retry waits at least that long (bounded by d.MaxRetryAfter).
//   - 409 with Idemgate-Stale: true: a newer attempt holds the resource;
//     the error matches fence.ErrStaleToken, so this attempt stops without
//     a verdict.
//   - 3xx (never followed) and any other 4xx: Permanent, with the status
//     and the start of the body.
//
// The errors name the URL with its password, query and fragment hidden,
// and quote the start of the answer's body: they are for the attempt
// ledger and the log. The job's tenant reads only the status, "receiver
// unreachable" or "receiver timed out" (see StatusFunc).
//
// Deliver panics if d.URL is not an absolute http(s) URL, a secret is
// empty or a static header is malformed: those are configuration mistakes,
// found at start-up.
func Deliver(d HTTPDelivery) Func[json.RawMessage] {
	dl := newDeliverer(d)
	return dl.deliver
}

// deliverer is an HTTPDelivery with its defaults applied and its inputs
// copied, so a caller that changes its maps or slices later changes nothing.
type deliverer struct {
	url           string
	shownURL      string // for errors: without a password or query
	secrets       [][]byte
	timeout       time.Duration
	headers       http.Header
	client        http.Client
	maxBytes      int64
	maxRetryAfter time.Duration
	now           func() time.Time
}

func newDeliverer(d HTTPDelivery) *deliverer {
	u, err := url.Parse(d.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		panic(fmt.Sprintf("workers: Deliver: URL %q is not an absolute http(s) URL", redactURL(d.URL)))
	}
	dl := &deliverer{
		url:           d.URL,
		shownURL:      redactURL(d.URL),
		timeout:       d.Timeout,
		headers:       http.Header{},
		maxBytes:      d.MaxResponseBytes,
		maxRetryAfter: d.MaxRetryAfter,
		now:           d.Now,
	}
	for i, s := range d.Secrets {
		if len(s) == 0 {
			panic(fmt.Sprintf("workers: Deliver %s: secret %d is empty", dl.shownURL, i+1))
		}
		dl.secrets = append(dl.secrets, bytes.Clone(s))
	}
	for name, value := range d.Headers {
		// The value is never quoted: it is usually a credential.
		if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
			panic(fmt.Sprintf("workers: Deliver %s: static header %q is malformed", dl.shownURL, name))
		}
		if !protocolHeader(name) {
			dl.headers.Set(name, value)
		}
	}
	if d.Client != nil {
		dl.client = *d.Client
	}
	dl.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if dl.timeout <= 0 {
		dl.timeout = DefaultDeliveryTimeout
	}
	if dl.maxBytes <= 0 {
		dl.maxBytes = DefaultDeliveryMaxResponseBytes
	}
	if dl.maxRetryAfter <= 0 {
		dl.maxRetryAfter = DefaultDeliveryMaxRetryAfter
	}
	if dl.now == nil {
		dl.now = time.Now
	}
	return dl
}

// redactURL is a delivery URL as errors, the attempt ledger and logs show
// it: the password hidden as url.URL.Redacted hides it, and the query and
// fragment replaced by "REDACTED", as they often carry a credential too
// (?token=…). The host stays: operators need to know where a delivery
// went, and tenants never see these texts (see publicReason).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = "REDACTED", false
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = "REDACTED", ""
	}
	return u.Redacted()
}

// protocolHeader reports whether a static header would replace one the
// delivery protocol sets; such a static header is dropped.
func protocolHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Content-Type", "Content-Length", "Host",
		http.CanonicalHeaderKey(headerWebhookID),
		http.CanonicalHeaderKey(headerWebhookTimestamp),
		http.CanonicalHeaderKey(headerWebhookSignature),
		headerIdempotencyKey, headerFencingToken, headerTenant, headerTask, headerAttempt,
		"Traceparent", "Tracestate":
		return true
	}
	return false
}

func (dl *deliverer) deliver(ctx context.Context, j Job[json.RawMessage]) (string, error) {
	if j.Task == nil {
		return "", Permanent(errors.New("deliver: job has no task"))
	}
	id := j.Task.Headers()[job.HeaderID]
	if id == "" {
		id, _ = asynq.GetTaskID(ctx)
	}
	if id == "" {
		// Without an id the receiver cannot tell a retry from a new message.
		return "", Permanent(fmt.Errorf("deliver %s: task has no job id", j.Key))
	}
	now := dl.now().UTC()
	token := strconv.FormatInt(j.Token, 10)
	body, err := deliveryBody(deliveryEnvelope{
		Type:         j.Task.Type(),
		Timestamp:    now.Format(time.RFC3339),
		JobID:        id,
		Tenant:       j.Tenant,
		BusinessKey:  j.Key,
		Attempt:      j.Attempt,
		FencingToken: token,
	}, j.Payload)
	if err != nil {
		return "", Permanent(fmt.Errorf("deliver %s: %w", j.Key, err))
	}

	actx, cancel := context.WithTimeout(ctx, dl.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, dl.url, bytes.NewReader(body))
	if err != nil {
		return "", Permanent(fmt.Errorf("deliver to %s: %w", dl.shownURL, err))
	}
	// net/http resends a request with an Idempotency-Key on its own when a
	// reused connection dies before the answer. The framework owns the
	// retries: each attempt is recorded, drawn a new fencing token and
	// paced by the backoff, so one attempt is one request.
	req.GetBody = nil
	for name, values := range dl.headers {
		req.Header[name] = values
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerWebhookID, id)
	req.Header.Set(headerWebhookTimestamp, ts)
	if len(dl.secrets) > 0 {
		req.Header.Set(headerWebhookSignature, signatures(dl.secrets, id, ts, body))
	}
	req.Header.Set(headerIdempotencyKey, j.Key)
	req.Header.Set(headerFencingToken, token)
	req.Header.Set(headerTenant, j.Tenant)
	req.Header.Set(headerTask, j.Task.Type())
	req.Header.Set(headerAttempt, strconv.Itoa(j.Attempt))
	// The OpenTelemetry API alone: a no-op without a valid span context.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))

	resp, err := dl.client.Do(req)
	if err != nil {
		return "", dl.callError(ctx, actx, err)
	}
	defer resp.Body.Close()
	answer, rerr := io.ReadAll(io.LimitReader(resp.Body, dl.maxBytes))
	return dl.judge(ctx, actx, j, resp, answer, rerr)
}

// judge turns the receiver's answer into the job's outcome. rerr is an
// error met reading the body.
func (dl *deliverer) judge(ctx, actx context.Context, j Job[json.RawMessage], resp *http.Response, body []byte, rerr error) (string, error) {
	status := resp.StatusCode
	switch {
	case status >= 200 && status < 300:
		// The status is the receiver's verdict: a body cut short only
		// costs the result reference.
		return resultRef(resp, body), nil
	case rerr != nil && ctx.Err() != nil:
		return "", dl.callError(ctx, actx, rerr)
	}
	answered := &statusError{url: dl.shownURL, status: status, body: clip(body, maxErrorBody)}
	switch {
	case status == http.StatusConflict && strings.EqualFold(strings.TrimSpace(resp.Header.Get(headerStale)), "true"):
		return "", fmt.Errorf("%w: %w", answered, fence.Stale(j.Resource, j.Token, 0))
	case retryable(status):
		var err error = answered
		if unavailableStatus(status) {
			err = Unavailable(answered)
		}
		if after, ok := retryAfter(resp.Header.Get("Retry-After"), dl.now(), dl.maxRetryAfter); ok {
			return "", &RetryAfterError{After: after, Err: err}
		}
		return "", err
	default:
		return "", Permanent(answered)
	}
}

// callError is the error of a call that got no answer: the receiver is
// unavailable (refused, reset, silent until the timeout). A cancelled ctx
// (the lock lost, a shutdown) says nothing about the receiver and is
// reported as such, so the framework sees why the attempt stopped.
func (dl *deliverer) callError(ctx, actx context.Context, err error) error {
	// *url.Error repeats the URL, possibly with a password in it.
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	switch {
	case ctx.Err() != nil:
		if cause := context.Cause(ctx); cause != ctx.Err() {
			err = fmt.Errorf("deliver to %s: %w: %w", dl.shownURL, ctx.Err(), cause)
		} else {
			err = fmt.Errorf("deliver to %s: %w", dl.shownURL, ctx.Err())
		}
		return &reasoned{reason: "attempt interrupted", err: err, unanswered: true}
	case errors.Is(actx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("deliver to %s: no answer within %s: %w", dl.shownURL, dl.timeout, context.DeadlineExceeded)
		return &reasoned{reason: "receiver timed out", err: Unavailable(err), unanswered: true}
	default:
		// A refused connection sent nothing; any other fault may have
		// cut the answer off after the request went out.
		return &reasoned{reason: "receiver unreachable", err: Unavailable(fmt.Errorf("deliver to %s: %w", dl.shownURL, err)),
			unanswered: !errors.Is(err, syscall.ECONNREFUSED)}
	}
}

// retryable reports whether a status means "not processed, try again".
// A status outside the classes HTTP defines is a receiver or proxy fault,
// not a verdict on the job, so it is retried as well.
func retryable(status int) bool {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return true
	case status >= 300 && status < 500:
		return false
	default:
		return true
	}
}

// unavailableStatus reports whether a retryable status says the receiver,
// or a proxy in front of it, could not take the request now: it is not a
// verdict on the job, so the attempt is not counted. A 500, and any other
// 5xx, may be the receiver failing on this very job, and is counted.
func unavailableStatus(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// resultRef is the reference a 2xx answer gives the job's result.
func resultRef(resp *http.Response, body []byte) string {
	var answer struct {
		ResultRef string `json:"result_ref"`
	}
	if json.Unmarshal(body, &answer) == nil && answer.ResultRef != "" {
		return answer.ResultRef
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		return loc
	}
	return "http:" + strconv.Itoa(resp.StatusCode)
}

// retryAfter reads a Retry-After header, delta-seconds or an HTTP-date,
// as a delay bounded by bound. It reports false for a header that is
// absent, malformed or asks for no delay.
func retryAfter(v string, now time.Time, bound time.Duration) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if strings.Trim(v, "0123456789") == "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(bound/time.Second) {
			// Too large for an int64 is still a (very long) delay.
			return bound, true
		}
		if secs == 0 {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := at.Sub(now)
	if d <= 0 {
		return 0, false
	}
	return min(d, bound), true
}

// statusError is an answer that is not a success.
type statusError struct {
	url    string
	status int
	body   string
}

func (e *statusError) Error() string {
	if e.body == "" {
		return fmt.Sprintf("%s answered %d", e.url, e.status)
	}
	return fmt.Sprintf("%s answered %d: %s", e.url, e.status, e.body)
}

// publicReason is the answer's status without the URL or the body.
func (e *statusError) publicReason() string {
	switch {
	case unavailableStatus(e.status):
		return fmt.Sprintf("receiver unavailable (answered %d)", e.status)
	case e.status >= 300 && e.status < 400:
		return fmt.Sprintf("receiver answered %d (redirects are not followed)", e.status)
	case e.status >= 400 && e.status < 500:
		return fmt.Sprintf("receiver refused the job (answered %d)", e.status)
	}
	return fmt.Sprintf("receiver answered %d", e.status)
}

// clip keeps the start of an answer's body for an error message: at most
// n characters of valid UTF-8, so the message can be stored and logged.
func clip(b []byte, n int) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// deliveryEnvelope is the body of a delivery, but for its data.
type deliveryEnvelope struct {
	Type         string `json:"type"`
	Timestamp    string `json:"timestamp"`
	JobID        string `json:"job_id"`
	Tenant       string `json:"tenant"`
	BusinessKey  string `json:"business_key"`
	Attempt      int    `json:"attempt"`
	FencingToken string `json:"fencing_token"`
}

// deliveryBody appends data to the envelope by hand: encoding/json would
// compact it and escape HTML in it, and the receiver should get the
// payload exactly as it was submitted.
func deliveryBody(e deliveryEnvelope, data json.RawMessage) ([]byte, error) {
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	if !json.Valid(data) {
		return nil, errors.New("payload is not JSON")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	b := bytes.TrimSuffix(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("}"))
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, '}'), nil
}

// signatures is the webhook-signature header: a Standard Webhooks v1
// signature per secret, space-separated.
func signatures(secrets [][]byte, id, ts string, body []byte) string {
	sigs := make([]string, len(secrets))
	for i, key := range secrets {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	return strings.Join(sigs, " ")
}
