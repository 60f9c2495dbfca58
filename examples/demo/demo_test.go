package demo_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/examples/demo"
)

// idemgate-examples reads worker.partner_url and checks that it is an
// http:// or https:// URL with a host.
func TestPartnerURLIsChecked(t *testing.T) {
	t.Parallel()
	check := func(url string) (int, string) {
		t.Helper()
		cfg := filepath.Join(t.TempDir(), "idemgate.yaml")
		yaml := `admin_listen: ""
store: memory
auth: {mode: none}
worker: {partner_url: "` + url + `"}
routes:
  - {name: up, methods: [POST], path: /up, upstream: "http://127.0.0.1:1"}
`
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := idemgate.Run(context.Background(), []string{"config", "check", "--config", cfg}, func(string) string { return "" }, &out, &out, demo.Options()...)
		return idemgate.ExitCode(err, &out), out.String()
	}
	if code, out := check("http://partner:9100"); code != 0 {
		t.Errorf("idemgate-examples config check: exit %d\n%s", code, out)
	}
	code, out := check("partner:9100")
	if code != 2 || !strings.Contains(out, `worker.partner_url: "partner:9100" is not an http:// or https:// URL with a host`) {
		t.Errorf("idemgate-examples config check of a bad URL: exit %d\n%s", code, out)
	}
}
