package testkit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
)

// WebhookSignature signs a delivery as a Standard Webhooks sender does,
// apart from the code under test: "v1," and the base64 HMAC-SHA256 of
// "{id}.{timestamp}.{body}" keyed with the secret, base64 after its
// "whsec_" prefix.
func WebhookSignature(t testing.TB, secret, id string, ts int64, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("testkit: webhook secret: %v", err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}
