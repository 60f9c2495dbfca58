package invariants

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/reconcile"
	"github.com/idemgate/idemgate/workers"
)

// partner compares the partner's own account of what it applied with what
// the database records: each applied effect (charge or message) must have
// been applied once and be recorded by one succeeded payment or one
// notification, and each recorded one must have been applied. This is the
// check that sees a double charge: a second charge for one payment, made
// under another Idempotency-Key, is recorded nowhere.
func (c checks) partner(ctx context.Context, s *reconcile.Snapshot) error {
	if c.opts.PartnerEffects == nil && c.opts.PartnerApplied == nil {
		return nil
	}
	var applied map[string]int
	if c.opts.PartnerEffects != nil {
		m, err := c.opts.PartnerEffects(ctx)
		if err != nil {
			return fmt.Errorf("partner effects: %w", err)
		}
		applied = maps.Clone(m)
	}
	var appliedCount int64
	countOnly := applied == nil
	if countOnly {
		n, err := c.opts.PartnerApplied(ctx)
		if err != nil {
			return fmt.Errorf("partner applied count: %w", err)
		}
		appliedCount = n
	}
	const query = `
SELECT 'payment', tenant, payment_id, partner_charge_id FROM payments
 WHERE status = 'succeeded' AND partner_charge_id IS NOT NULL
UNION ALL
SELECT 'notification', tenant, dedup_key, partner_message_id FROM notifications`
	var recorded int64
	seen := map[string]bool{} // effects recorded twice are CheckPayments' to report
	err := s.Scan(ctx, CheckPartner, query, nil, func(rows pgx.Rows) error {
		var kind, tenant, id, effect string
		if err := rows.Scan(&kind, &tenant, &id, &effect); err != nil {
			return err
		}
		id = workers.Scope(tenant, id)
		recorded++
		if applied == nil || seen[effect] {
			return nil
		}
		seen[effect] = true
		n, ok := applied[effect]
		switch {
		case !ok:
			s.Violation(CheckPartner, fmt.Sprintf("%s %s records %s, which the partner never applied", kind, id, effect), id, effect)
			return nil
		case n > 1:
			s.Violation(CheckPartner, fmt.Sprintf("the partner applied %s, recorded by %s %s, %s", effect, kind, id, times(n)), id, effect)
		}
		delete(applied, effect)
		return nil
	})
	if err != nil {
		return err
	}
	for _, effect := range slices.Sorted(maps.Keys(applied)) {
		s.Violation(CheckPartner,
			fmt.Sprintf("the partner applied %s (%s), which no succeeded payment or notification records", effect, times(applied[effect])),
			effect)
	}
	if countOnly && appliedCount != recorded {
		s.Violation(CheckPartner,
			fmt.Sprintf("the partner applied %d effects, %d are recorded (succeeded payments and notifications)", appliedCount, recorded))
	}
	return nil
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// StatsApplied returns an Options.PartnerApplied that reads the "applied"
// count from a partnersim-style `GET {baseURL}/stats` with client (nil:
// http.DefaultClient).
func StatsApplied(client *http.Client, baseURL string) func(context.Context) (int64, error) {
	if client == nil {
		client = http.DefaultClient
	}
	url := strings.TrimSuffix(baseURL, "/") + "/stats"
	return func(ctx context.Context) (int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if err != nil {
			return 0, fmt.Errorf("GET %s: %w", url, err)
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		var stats struct {
			Applied *int64 `json:"applied"`
		}
		if err := json.Unmarshal(body, &stats); err != nil || stats.Applied == nil {
			return 0, fmt.Errorf("GET %s: no \"applied\" count in %.100q", url, body)
		}
		return *stats.Applied, nil
	}
}
