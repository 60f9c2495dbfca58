package job

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/ijson"
)

// The bounds of PostgreSQL's numeric, which holds every number of a
// payload (the jobs table keeps it as jsonb): digits before the decimal
// point, and after it.
const (
	maxNumericWeight = 131072
	maxNumericScale  = 16383
)

// maxFaults bounds the faults one body reports, so that a body full of
// them gets a short answer.
const maxFaults = 20

// unstorable reports what keeps a decoded body from being a payload: it
// must be I-JSON (RFC 7493), so that the gateway, the worker, the
// receiver and PostgreSQL read one document (no duplicate names, UTF-8,
// surrogate escapes only in pairs); and PostgreSQL must hold it, so no
// string or name holds U+0000 and every number fits numeric. A body that
// breaks either is refused as malformed, before anything is recorded: a
// write that PostgreSQL refuses would otherwise look like an outage, and
// the client would retry it forever. checked is what ijson.Check said of
// the body.
func unstorable(checked error, data any) []FieldError {
	if checked != nil {
		var je *ijson.Error
		if !errors.As(checked, &je) {
			return []FieldError{{Field: "", Message: checked.Error()}}
		}
		return []FieldError{{Field: fieldPath(data, je.Path), Message: je.Reason + "; the body must be I-JSON (RFC 7493)"}}
	}
	var faults []FieldError
	walkStorable(data, nil, data, &faults)
	return sortFields(faults)
}

func walkStorable(v any, loc []string, root any, faults *[]FieldError) {
	if len(*faults) >= maxFaults {
		return
	}
	switch t := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			if strings.IndexByte(k, 0) >= 0 {
				*faults = append(*faults, FieldError{Field: fieldPath(root, loc),
					Message: "the member name " + strconv.Quote(k) + " holds U+0000 (\\u0000), which cannot be stored"})
			}
			walkStorable(t[k], append(loc, k), root, faults)
		}
	case []any:
		for i, e := range t {
			walkStorable(e, append(loc, strconv.Itoa(i)), root, faults)
		}
	case string:
		if strings.IndexByte(t, 0) >= 0 {
			*faults = append(*faults, FieldError{Field: fieldPath(root, loc), Message: "holds U+0000 (\\u0000), which cannot be stored"})
		}
	case json.Number:
		if msg := numericFault(string(t)); msg != "" {
			*faults = append(*faults, FieldError{Field: fieldPath(root, loc), Message: msg})
		}
	}
}

// numericFault says why the JSON number n does not fit PostgreSQL's
// numeric, or "" when it does: at most maxNumericWeight digits before the
// decimal point and maxNumericScale after it, counted as written (1.50
// has two after it, 1e-3 three).
func numericFault(n string) string {
	mant, exp, hasExp := strings.Cut(strings.TrimPrefix(n, "-"), "e")
	if !hasExp {
		mant, exp, _ = strings.Cut(mant, "E")
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	e, ok := exponent(exp)
	// The digits, the decimal point after point of them.
	digits := intPart + frac
	point := int64(len(intPart)) + e
	lead := int64(len(digits) - len(strings.TrimLeft(digits, "0")))
	zero := lead == int64(len(digits))
	switch {
	case !ok && (e > 0) && !zero, !zero && point-lead > maxNumericWeight:
		return "the number " + shorten(n) + " is too large to be stored (at most " + strconv.Itoa(maxNumericWeight) + " digits before the decimal point)"
	case !ok && e < 0, int64(len(digits))-point > maxNumericScale:
		return "the number " + shorten(n) + " has too many digits after the decimal point to be stored (at most " + strconv.Itoa(maxNumericScale) + ")"
	}
	return ""
}

// exponent parses a number's exponent; ok is false when it is so large in
// magnitude that e only gives its sign.
func exponent(s string) (e int64, ok bool) {
	if s == "" {
		return 0, true
	}
	e, err := strconv.ParseInt(s, 10, 64)
	if err == nil && e > -1<<40 && e < 1<<40 {
		return e, true
	}
	if strings.HasPrefix(s, "-") {
		return -1, false
	}
	return 1, false
}

func shorten(n string) string {
	if len(n) <= 40 {
		return n
	}
	return n[:20] + "…" + n[len(n)-12:]
}
