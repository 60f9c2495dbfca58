package workers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/idemgate/idemgate/job"
)

// Scope names a resource within its tenant: "acme/order:o-1". Locks and
// fences are taken on the scoped name, so two tenants with the same order
// id never queue behind each other or refuse each other's tokens. Tenant
// names cannot contain "/"; a task without a tenant keeps the bare name.
func Scope(tenant, resource string) string {
	if tenant == "" {
		return resource
	}
	return tenant + "/" + resource
}

// payloadSHA256 hashes the canonical JSON of a payload, so the same fields
// written in another order or spacing are the same payload.
func payloadSHA256(payload []byte) (string, error) {
	canon, err := job.Canonical(payload)
	if err != nil {
		return "", fmt.Errorf("payload is not JSON: %w", err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}
