package config

import (
	"github.com/idemgate/idemgate/job"
)

// OnFinal is a job's on_final: what the worker does once the job is
// final. The URL is declared here, never chosen by a producer.
type OnFinal struct {
	// HTTP POSTs one Standard Webhooks-signed event per final status
	// (job.succeeded, job.failed, job.cancelled), with the job document,
	// webhook-id "<job id>:final". Required.
	HTTP *OnFinalHTTP `yaml:"http"`
}

// OnFinalHTTP is on_final.http: deliver.http's url, secret, timeout and
// headers, checked the same way (the headers may not replace those the
// callback sets itself), and a bound of its own.
type OnFinalHTTP struct {
	DeliverHTTP `yaml:",inline"`
	// MaxAttempts bounds the POSTs of one event; after the last one
	// fails, the callback is abandoned (and `explain` shows it). Default
	// job.DefaultCallbackMaxAttempts, 10: with the backoff (10s doubling,
	// at most 1h, jittered) the last comes 43 to 85 minutes after the
	// first.
	MaxAttempts int `yaml:"max_attempts"`
}

// onFinal checks on_final and returns its compiled form.
func onFinal(o *OnFinal, at string, bad badFunc) *job.Callback {
	if o.HTTP == nil {
		bad(at, "needs http: the url and secret of the receiver of the final-status events")
		return nil
	}
	h := o.HTTP
	d := deliverHTTP(&h.DeliverHTTP, at+".http", bad)
	if h.MaxAttempts < 1 {
		bad(at+".http.max_attempts", "must be at least 1, not %d", h.MaxAttempts)
	}
	return &job.Callback{HTTP: *d, MaxAttempts: h.MaxAttempts}
}
