package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/idemgate/idemgate/extension"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

func runKeys(ctx context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, _ io.Writer) error {
	fs := newConfigFlags("keys", "keys get|delete|resolve TENANT ROUTE KEY --config FILE", stdout)
	pos, err := fs.parseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) != 4 {
		fs.Usage()
		return usagef("keys: want an operation (get, delete, resolve) and TENANT ROUTE KEY")
	}
	op := pos[0]
	scope := idempotency.Scope{Tenant: pos[1], Route: pos[2], Key: pos[3]}
	if op != "get" && op != "delete" && op != "resolve" {
		return usagef("keys: unknown operation %q (want get, delete or resolve)", op)
	}
	cfg, err := fs.load(ext, getenv, false)
	if err != nil {
		return err
	}
	if cfg.Store == "memory" {
		return usagef("keys: store memory lives inside the gateway process; use the admin API (/admin/keys/...)")
	}
	if _, ok := cfg.Route(scope.Route); !ok {
		return usagef("keys: no route named %q in %s", scope.Route, *fs.path)
	}
	// The records are the gateway's: open its services as it does.
	var cl closers
	defer cl.close()
	deps, err := openGatewayDeps(ctx, cfg, newServices(cfg, &cl), false)
	if err != nil {
		return err
	}
	st := deps.store
	switch op {
	case "delete":
		if _, err := st.Get(ctx, scope); err != nil {
			return keyError(err)
		}
		if err := st.Delete(ctx, scope); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %s/%s/%s\n", scope.Tenant, scope.Route, scope.Key)
		return nil
	case "resolve":
		if err := st.Resolve(ctx, scope); err != nil {
			return keyError(err)
		}
		fmt.Fprintf(stdout, "resolved %s/%s/%s: released; the next retry runs again\n", scope.Tenant, scope.Route, scope.Key)
	}
	rec, err := st.Get(ctx, scope)
	if err != nil {
		return keyError(err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(gateway.NewRecordDocument(rec))
}

func keyError(err error) error {
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return errors.New("no idempotency record for this tenant, route and key")
	case errors.Is(err, idempotency.ErrNotUnknown):
		return errors.New("the record's outcome is not unknown; only an unknown outcome can be resolved (delete it to force a re-run)")
	}
	return err
}
