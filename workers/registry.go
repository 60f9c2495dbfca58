package workers

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/hibiken/asynq"

	"github.com/idemgate/idemgate/job"
)

// Handlers are a program's Go handlers, by task name: the business
// functions of the jobs its configuration declares without deliver.http.
// Registering a handler does not run it; Mux builds the handlers of the
// declared jobs, each wrapped in the idempotent algorithm of Handle.
//
//	hs := workers.NewHandlers()
//	workers.Add(hs, "shipment.book", bookShipment) // a Func[Shipment]
//	mux, err := hs.Mux(deps, cfg.Jobs(), workers.HTTPDelivery{})
type Handlers struct {
	build map[string]func(Deps, *job.Spec) asynq.Handler
}

// NewHandlers returns an empty set of handlers.
func NewHandlers() *Handlers {
	return &Handlers{build: map[string]func(Deps, *job.Spec) asynq.Handler{}}
}

// Keyed is a typed payload that derives its own business key and resource.
// A payload without these methods takes them from the job's declaration
// (business_key and resource templates), which is usually enough.
type Keyed interface {
	BusinessKey() string
	Resource() string
}

// Add registers fn as the handler of task. The payload is validated
// against the job's declared schema before fn sees it, then decoded into
// T. Add panics on an empty task, a nil fn, or a task registered twice:
// wiring mistakes, found at start-up.
func Add[T any](hs *Handlers, task string, fn Func[T], opts ...Option) {
	switch {
	case task == "":
		panic("workers: Add: empty task name")
	case fn == nil:
		panic("workers: Add " + task + ": nil business function")
	}
	if _, dup := hs.build[task]; dup {
		panic("workers: Add " + task + ": registered twice")
	}
	hs.build[task] = func(deps Deps, spec *job.Spec) asynq.Handler {
		return newHandler(deps, task, specIdentity[T](spec), fn, specOptions(spec, opts)...)
	}
}

// Tasks lists the registered task names, sorted.
func (hs *Handlers) Tasks() []string { return slices.Sorted(maps.Keys(hs.build)) }

// Has reports whether task has a Go handler.
func (hs *Handlers) Has(task string) bool {
	_, ok := hs.build[task]
	return ok
}

// Mux returns the asynq mux that runs every declared job: a job with
// deliver.http is POSTed to its receiver (Deliver, with base's client and
// limits and the job's URL, secrets, timeout and headers); any other job
// runs its registered Go handler. A declared job with neither is an error,
// and every such job is named at once.
func (hs *Handlers) Mux(deps Deps, specs []*job.Spec, base HTTPDelivery) (*asynq.ServeMux, error) {
	mux := asynq.NewServeMux()
	var missing []string
	for _, spec := range specs {
		switch {
		case spec.HTTP != nil:
			d := base
			d.URL, d.Secrets, d.Timeout, d.Headers = spec.HTTP.URL, spec.HTTP.Secrets, spec.HTTP.Timeout, spec.HTTP.Headers
			// A cancel does not abort a delivery in flight: its answer
			// decides the job.
			opts := append(specOptions(spec, nil), func(o *options) { o.uninterrupted = true })
			mux.Handle(spec.Task, newHandler(deps, spec.Task, specIdentity[json.RawMessage](spec), Deliver(d), opts...))
		case hs != nil && hs.Has(spec.Task):
			mux.Handle(spec.Task, hs.build[spec.Task](deps, spec))
		default:
			missing = append(missing, spec.Task)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("workers: no worker can run %q: declare deliver.http or register a Go handler", missing)
	}
	return mux, nil
}

// specOptions adds the job's declared limits to opts.
func specOptions(spec *job.Spec, opts []Option) []Option {
	if spec.MaxAttempts > 0 {
		opts = append([]Option{WithMaxAttempts(spec.MaxAttempts)}, opts...)
	}
	if len(spec.Limits) > 0 {
		opts = append([]Option{WithLimits(spec.Limits...)}, opts...)
	}
	return opts
}

var keyedType = reflect.TypeFor[Keyed]()

// specIdentity validates a payload against the job's schema and derives
// its business key and resource: from T's own methods when T is Keyed,
// otherwise from the declared templates. A job declared without a resource
// is serialised on its business key.
func specIdentity[T any](spec *job.Spec) identity[T] {
	keyed := reflect.TypeFor[T]().Implements(keyedType)
	return func(raw []byte, p T) (string, string, error) {
		decoded, err := spec.Decode(raw)
		if err != nil {
			return "", "", err
		}
		key, resource := decoded.BusinessKey, decoded.Resource
		if keyed {
			k := any(p).(Keyed)
			key, resource = k.BusinessKey(), k.Resource()
		}
		if resource == "" {
			resource = key
		}
		if key == "" {
			return "", "", errors.New("the payload gives an empty business key")
		}
		return key, resource, nil
	}
}
