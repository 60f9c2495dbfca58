package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/idemgate/idemgate/job"
)

// cliAudit keeps the actions an operator takes from the command line in
// the audit trail (admin_actions), as the admin API and the console do.
type cliAudit struct {
	records *job.Store
	getenv  func(string) string
	stderr  io.Writer
}

// cliActor is who acted from the command line: "cli:" and the login
// name ($USER, else $LOGNAME), or "cli" when neither is set.
func cliActor(getenv func(string) string) string {
	for _, v := range []string{"USER", "LOGNAME"} {
		if name := getenv(v); name != "" {
			return "cli:" + name
		}
	}
	return "cli"
}

// record keeps act, done on targets, as one action via "cli"; no targets
// records nothing. A failure to write it is said on stderr: the action
// has happened and is not undone.
func (a cliAudit) record(ctx context.Context, act job.Action, targets []job.Action) {
	if len(targets) == 0 {
		return
	}
	act.Actor, act.Via = cliActor(a.getenv), "cli"
	if _, err := a.records.RecordAction(ctx, act, targets); err != nil {
		fmt.Fprintf(a.stderr, "warning: the %s was done but not recorded in the audit trail: %v\n", act.Action, err)
	}
}
