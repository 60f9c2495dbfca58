package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/job"
)

// limitJob is a job with HTTP delivery whose schema requires account and
// order.id, and whose limits are the YAML flow list uses.
func limitJob(uses string) string {
	return `jobs:
  - task: shipment.book
    schema:
      type: object
      required: [account, order]
      properties:
        account: {type: string}
        note: {type: string}
        order: {type: object, required: [id], properties: {id: {type: string}}}
    business_key: "ship:{order.id}"
    deliver: {http: {url: "https://ship.example/hooks", secret: "` + secret + `"}}
    limits: ` + uses + "\n"
}

func TestLimitsOfValid(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(enqueueBase+`limits:
  - {name: ship-api, concurrency: 8, rate: 20/1s, burst: 5}
  - {name: ship-accounts, rate: 100/1m}
  - {name: ship-global, concurrency: 50}
`+limitJob(`[{use: ship-api, key: "{tenant}"}, {use: ship-accounts, key: "acct:{account}:{order.id}"}, {use: ship-global}]`)), "x.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	spec, ok := cfg.Job("shipment.book")
	if !ok {
		t.Fatal("shipment.book not compiled")
	}
	want := []job.FlowLimit{
		{Name: "ship-api", Concurrency: 8, Rate: 20, Period: time.Second, Burst: 5},
		{Name: "ship-accounts", Rate: 100, Period: time.Minute, Burst: job.DefaultBurst},
		{Name: "ship-global", Concurrency: 50},
	}
	if len(spec.Limits) != len(want) {
		t.Fatalf("Spec.Limits = %+v", spec.Limits)
	}
	payload := map[string]any{"account": "a:1", "order": map[string]any{"id": "o-7"}, "tenant": "not-the-tenant"}
	wantValues := []string{"acme", "acct:a%3A1:o-7", ""}
	for i, u := range spec.Limits {
		if u.Limit != want[i] {
			t.Errorf("limit %d = %+v, want %+v", i, u.Limit, want[i])
		}
		if v, err := u.Value("acme", payload); err != nil || v != wantValues[i] {
			t.Errorf("limit %s value = %q, %v; want %q", u.Limit.Name, v, err, wantValues[i])
		}
	}
	if got := cfg.LimitDefs(); !slices.Equal(got, want) {
		t.Errorf("LimitDefs = %+v", got)
	}
}

func TestLimitsPauseAfter(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(enqueueBase+`limits:
  - {name: ship-api, concurrency: 8, pause_after: {consecutive_failures: 50, within: 1m, for: 5m}}
`), "x.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	l, _ := cfg.Limit("ship-api")
	if l.PauseAfter == nil || *l.PauseAfter != (job.Breaker{Failures: 50, Within: time.Minute, For: 5 * time.Minute}) {
		t.Errorf("PauseAfter = %+v", l.PauseAfter)
	}
}

func TestLimitsValidate(t *testing.T) {
	t.Parallel()
	const use = `[{use: ship-api, key: "{tenant}"}]`
	for _, tc := range []struct {
		name, yaml string
		want       []string // each a whole line of the error
	}{
		{
			name: "an unknown limit",
			yaml: "limits:\n  - {name: ship-api, concurrency: 1}\n" + limitJob(`[{use: label-api, key: "{tenant}"}]`),
			want: []string{`x.yaml:18: jobs[0].limits[0].use: "label-api" is not a declared limit (declared: ship-api)`},
		},
		{
			name: "no limits declared",
			yaml: limitJob(use),
			want: []string{`x.yaml:16: jobs[0].limits[0].use: "ship-api" is not a declared limit; declare it under limits`},
		},
		{
			name: "a key on a field the schema does not require",
			yaml: "limits:\n  - {name: ship-api, concurrency: 1}\n" + limitJob(`[{use: ship-api, key: "{note}"}, {use: ship-api, key: "{tenant}"}]`),
			want: []string{
				`x.yaml:18: jobs[0].limits[0].key: {note} names a field the schema does not require: add it to the schema's "required" (or key on {tenant})`,
				`x.yaml:18: jobs[0].limits[1].use: "ship-api" is also used by jobs[0].limits[0]: a job takes each limit once`,
			},
		},
		{
			name: "a key that names no field, and one that does not parse",
			yaml: "limits:\n  - {name: a, concurrency: 1}\n  - {name: b, concurrency: 1}\n" + limitJob(`[{use: a, key: "acme"}, {use: b, key: "{tenant"}]`),
			want: []string{
				`x.yaml:19: jobs[0].limits[0].key: "acme" names no {field}: leave key out for one budget shared by every job that uses a`,
				`x.yaml:19: jobs[0].limits[1].key: template "{tenant": the { at 1 is not closed`,
			},
		},
		{
			name: "concurrency below 1, bad rates and bursts",
			yaml: `limits:
  - {name: a, concurrency: 0}
  - {name: b, rate: 20}
  - {name: c, rate: 0/1s}
  - {name: d, rate: 20/soon}
  - {name: e, concurrency: 2, burst: 3}
  - {name: f, rate: 1/1s, burst: 0}
`,
			want: []string{
				"x.yaml:6: limits[0].concurrency: must be at least 1, not 0 (leave it out for no concurrency limit)",
				`x.yaml:7: limits[1].rate: rate "20" is not N/duration, like 20/1s or 100/1m`,
				`x.yaml:8: limits[2].rate: rate "0/1s": "0" is not a positive whole number of starts`,
				`x.yaml:9: limits[3].rate: rate "20/soon": "soon" is not a positive duration, like 1s or 1m`,
				"x.yaml:10: limits[4].burst: needs a rate: a burst is how many starts may come at once above the rate's pace",
				"x.yaml:11: limits[5].burst: must be at least 1, not 0",
			},
		},
		{
			name: "a broken limit, and a key on an unrequired field that uses it",
			yaml: "limits:\n  - {name: ship-api, concurrency: 0}\n" + limitJob(`[{use: ship-api, key: "{note}"}]`),
			want: []string{
				"x.yaml:6: limits[0].concurrency: must be at least 1, not 0 (leave it out for no concurrency limit)",
				`x.yaml:18: jobs[0].limits[0].key: {note} names a field the schema does not require: add it to the schema's "required" (or key on {tenant})`,
			},
		},
		{
			name: "a breaker out of bounds",
			yaml: "limits:\n  - {name: a, concurrency: 1, pause_after: {consecutive_failures: 0, within: 500ms, for: 0s}}\n",
			want: []string{
				"x.yaml:6: limits[0].pause_after.consecutive_failures: must be at least 1, not 0",
				"x.yaml:6: limits[0].pause_after.within: must be at least 1s, not 500ms",
				"x.yaml:6: limits[0].pause_after.for: must be at least 1s, not 0s",
			},
		},
		{
			name: "a limit with neither, without a name, twice",
			yaml: "limits:\n  - {name: a}\n  - {concurrency: 1}\n  - {name: b, concurrency: 1}\n  - {name: b, rate: 1/1s}\n",
			want: []string{
				"x.yaml:6: limits[0]: needs concurrency, rate or both: a limit without either limits nothing",
				"x.yaml:7: limits[1].name: required: the name jobs use it by, like ship-api",
				`x.yaml:9: limits[3].name: "b" is also the name of limits[2]`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantProblems(t, enqueueBase+tc.yaml, "x.yaml", tc.want)
		})
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"20/1s": 50 * time.Millisecond, "100/1m": 600 * time.Millisecond, "5/s": 200 * time.Millisecond, "3/1h": 20 * time.Minute} {
		n, per, err := job.ParseRate(in)
		if err != nil {
			t.Errorf("ParseRate(%q): %v", in, err)
			continue
		}
		if l := (job.FlowLimit{Rate: n, Period: per}); l.Interval() != want || l.RateString() == "" {
			t.Errorf("ParseRate(%q) = %d per %s, interval %s; want %s", in, n, per, l.Interval(), want)
		}
	}
}

// TestLimitKeyWithoutTenantWarns: a flow-limit key that does not name
// {tenant} counts one budget per value across tenants, which a tenant can
// spend by sending another's value. It may be meant (one partner account
// for everyone), so config check warns and accepts it.
func TestLimitKeyWithoutTenantWarns(t *testing.T) {
	t.Parallel()
	const tenants = "auth: {mode: api_key}\ntenants:\n  - {name: acme, api_key_sha256: [" +
		"2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae]}\n"
	doc := strings.Replace(enqueueBase, "auth: {mode: none}\n", tenants, 1) + `limits:
  - {name: ship-api, concurrency: 8}
  - {name: ship-accounts, rate: 100/1m}
  - {name: ship-global, concurrency: 50}
  - {name: ship-orders, concurrency: 1}
` + limitJob(`[{use: ship-api, key: "{tenant}"}, {use: ship-accounts, key: "acct:{account}"}, {use: ship-global}, {use: ship-orders, key: "{tenant}/{order.id}"}]`)
	cfg, err := Parse([]byte(doc), "x.yaml", nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := []string{`jobs[0] (shipment.book).limits[1]: key "acct:{account}" names no {tenant}: every tenant shares each value's budget of ship-accounts, ` +
		`and a tenant that sends another's value spends it; add {tenant} unless the budget is meant to be shared`}
	var got []string
	for _, w := range cfg.Warnings() {
		if strings.Contains(w, "limits[") {
			got = append(got, w)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings about limit keys:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
