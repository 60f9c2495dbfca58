package config

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/extension"
)

// partnerSetting claims worker.partner_url as idemgate-examples does,
// writing what it is given into *got.
func partnerSetting(got *string) extension.Setting {
	return extension.Setting{
		Key:     "worker.partner_url",
		Default: "http://127.0.0.1:9100",
		Set: func(v string) string {
			*got = v
			if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Sprintf("%q is not an http:// or https:// URL with a host", v)
			}
			return ""
		},
		Listener: func(v string) (string, bool) {
			u, err := url.Parse(v)
			return u.Host, err == nil && u.Hostname() == "127.0.0.1"
		},
	}
}

// A key a program claims is read into its setting (its default when the
// file has none) and checked where it is written; without the claim it is
// refused, and worker.partner_url's refusal says whose key it is.
func TestClaimedSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		claimed bool
		got     string // what the setting was given
		err     string // "" for none
	}{
		{"written", "worker: {partner_url: \"http://partner:9100\"}\n", true, "http://partner:9100", ""},
		{"absent: the default", "worker: {concurrency: 2}\n", true, "http://127.0.0.1:9100", ""},
		{"from the environment", "worker: {partner_url: \"${P}\"}\n", true, "http://from-env:1", ""},
		{"a bad value, at its line", "worker:\n  concurrency: 2\n  partner_url: \"127.0.0.1:9100\"\n", true, "127.0.0.1:9100",
			`x.yaml:` + fmt.Sprint(strings.Count(minimal, "\n")+3) + `: worker.partner_url: "127.0.0.1:9100" is not an http:// or https:// URL with a host`},
		{"not a string", "worker: {partner_url: [a, b]}\n", true, "", "worker.partner_url: must be a string"},
		{"not claimed", "worker: {partner_url: \"http://partner:9100\"}\n", false, "",
			"worker.partner_url: the example jobs' setting (their partner's URL), which only idemgate-examples reads"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got string
			var opts []Option
			if tc.claimed {
				opts = append(opts, WithSettings(partnerSetting(&got)))
			}
			_, err := Parse([]byte(minimal+tc.yaml), "x.yaml", env(map[string]string{"P": "http://from-env:1"}), opts...)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Parse: %v, want %q", err, tc.err)
			}
			if got != tc.got {
				t.Errorf("the setting was given %q, want %q", got, tc.got)
			}
		})
	}
}
