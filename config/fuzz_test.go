package config

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/middleware/ratelimit"
)

// FuzzExpand: ${VAR} expansion never panics, never adds or removes a line
// (a value with a line break is refused), reports each problem on a line
// of the text, and leaves a text without "$" as it is.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{
		"listen: ${LISTEN:-:8080}\n", "a: ${N}\nb: $${N}\n", "a: '${N}' # ${NOPE}\n", `a: "x\"${N}"`,
		"a: ${1BAD}\n", "a: ${UNSET}\n", "a: ${N:-}\n", "a: ${\n", "a: ${MULTI}\n", "a: b\r\nc: ${N}",
	} {
		f.Add([]byte(s))
	}
	getenv := env(map[string]string{"N": "3", "LISTEN": ":9", "MULTI": "a\nb"})
	f.Fuzz(func(t *testing.T, data []byte) {
		out, refs := expand(data, getenv)
		if got, want := bytes.Count(out, []byte("\n")), bytes.Count(data, []byte("\n")); got != want {
			t.Fatalf("expand(%q) = %q: %d line breaks, want %d", data, out, got, want)
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, r := range refs {
			if r.line < 1 || r.line > lines || r.col < 1 || r.msg == "" || strings.ContainsAny(r.msg, "\r\n") {
				t.Fatalf("expand(%q): problem %+v is not on one of its %d lines", data, r, lines)
			}
		}
		if !bytes.Contains(data, []byte("$")) && (!bytes.Equal(out, data) || len(refs) > 0) {
			t.Fatalf("expand(%q) = %q, %v; a text without $ must stay as it is", data, out, refs)
		}
	})
}

// FuzzParseRateLimit: every tenant budget the configuration accepts —
// whatever its size — is one the rate limiter takes and grants in full:
// its first request is allowed with tokens-1 left.
func FuzzParseRateLimit(f *testing.F) {
	for _, s := range [][2]string{
		{"100", "1s"}, {"100000000", "1s"}, {"1000000000", "1ms"}, {"3", "24h"}, {"9223372036854775807", "1ns"},
		{"0", "1s"}, {"-1", "1s"}, {"1", "0s"}, {"1e3", "1s"}, {"10", "1d"}, {"0x10", "1m30s"}, {"${N}", "${D:-2s}"},
	} {
		f.Add(s[0], s[1])
	}
	getenv := env(map[string]string{"N": "7"})
	f.Fuzz(func(t *testing.T, tokens, interval string) {
		if strings.ContainsAny(tokens+interval, "\r\n{}[],#&*!|>'\"%@`") {
			return // not one flow scalar
		}
		doc := "store: memory\nadmin_listen: \"\"\nauth: {mode: header, header: X-Tenant}\n" +
			"tenants:\n  - name: acme\n    rate_limit: {tokens: " + tokens + ", interval: " + interval + "}\n"
		cfg, err := Parse([]byte(doc), "fuzz.yaml", getenv)
		if err != nil {
			var ps *Errors
			if !errors.As(err, &ps) || len(ps.List) == 0 {
				t.Fatalf("error %v is not a non-empty *Errors", err)
			}
			return
		}
		rl := cfg.Tenants[0].RateLimit
		if rl == nil || rl.Tokens <= 0 || rl.Interval <= 0 {
			t.Fatalf("accepted rate_limit %+v from %q, %q", rl, tokens, interval)
		}
		l := ratelimit.Limit{Tokens: uint64(rl.Tokens), Interval: time.Duration(rl.Interval)}
		if err := ratelimit.Validate(ratelimit.Limits{"acme": l}, ratelimit.Config{Key: func(*http.Request) string { return "" }}); err != nil {
			t.Fatalf("accepted %+v, which the limiter refuses: %v", rl, err)
		}
		st, err := ratelimit.MemoryStore(l)
		if err != nil {
			t.Fatalf("MemoryStore(%+v): %v", l, err)
		}
		defer st.Close(context.Background())
		limit, remaining, _, ok, err := st.Take(context.Background(), "acme")
		if err != nil || !ok || limit != l.Tokens || remaining != l.Tokens-1 {
			t.Fatalf("%+v: first take = %d, %d, %v, %v; want the whole budget", l, limit, remaining, ok, err)
		}
	})
}
