package config

import (
	"fmt"
	"slices"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/middleware/auth"
	"github.com/idemgate/idemgate/middleware/idempotency"
)

// Warnings lists what is allowed but probably not meant, one line each.
func (c *Config) Warnings() []string {
	var w []string
	if c.Auth.Mode == string(auth.ModeNone) {
		w = append(w, fmt.Sprintf("auth.mode none: every request is tenant %q; unsafe for multi-tenant use", auth.Anonymous))
		if len(c.Tenants) > 0 {
			w = append(w, "auth.mode none: tenants are ignored")
		}
	}
	w = append(w, c.devClashes()...)
	if c.Store == "memory" {
		w = append(w, "store memory: idempotency records live in this process only; a restart forgets them and other instances never see them")
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		d := r.Idempotency
		at := fmt.Sprintf("routes[%d] (%s)", i, r.Name)
		if d.OnStoreError == idempotency.FailOpen {
			w = append(w, at+": on_store_error fail_open: while the store is unavailable requests run without idempotency protection")
		}
		if len(d.Methods) == 0 {
			w = append(w, at+": idempotency.methods is empty: no request needs an Idempotency-Key")
		}
		if r.Timeout > c.Server.WriteTimeout && c.Server.WriteTimeout > 0 {
			w = append(w, fmt.Sprintf("%s: timeout %s is longer than server.write_timeout %s; the client's connection is cut first", at, r.Timeout, c.Server.WriteTimeout))
		}
	}
	w = append(w, c.sharedLimitKeys()...)
	w = append(w, c.retentionWarnings()...)
	return w
}

// sharedLimitKeys lists the flow-limit keys that do not name {tenant}:
// each value's budget is then shared by every tenant, and a payload
// chooses the value, so a tenant that sends another's account spends its
// budget. A budget shared on purpose (one partner account for everyone)
// needs such a key, so this warns and does not refuse. A key left out (one
// budget for every job) is plainly shared and not listed; with auth.mode
// none there is one tenant.
func (c *Config) sharedLimitKeys() []string {
	if c.Auth.Mode == string(auth.ModeNone) {
		return nil
	}
	var w []string
	for i, j := range c.DeclaredJobs {
		for k, u := range j.Limits {
			t, err := job.ParseTemplate(u.Key)
			if u.Key == "" || err != nil || slices.Contains(t.Fields(), "tenant") {
				continue
			}
			w = append(w, fmt.Sprintf("jobs[%d] (%s).limits[%d]: key %q names no {tenant}: every tenant shares each value's budget of %s, "+
				"and a tenant that sends another's value spends it; add {tenant} unless the budget is meant to be shared", i, j.Task, k, u.Key, u.Use))
		}
	}
	return w
}

// devClashes lists listeners that `idemgate dev`, which runs the gateway,
// the worker and the program's own servers (idemgate-examples: partnersim
// on worker.partner_url) in one process, could not all open. Separate
// processes may share a port on different hosts, so these only warn.
func (c *Config) devClashes() []string {
	type listener = claimedListener
	var ls []listener
	for _, l := range []listener{{"listen", c.Listen}, {"admin_listen", c.AdminListen}, {"worker.admin_listen", c.Worker.AdminListen}} {
		if l.addr != "" && listenProblem(l.addr) == "" {
			ls = append(ls, l)
		}
	}
	ls = append(ls, c.claimedListeners...)
	var w []string
	for i := range ls {
		for j := range i {
			if clash(ls[i].addr, ls[j].addr) && !(ls[i].key == "admin_listen" && ls[j].key == "listen") {
				w = append(w, fmt.Sprintf("%s %q uses the same port as %s %q: idemgate dev cannot open both", ls[i].key, ls[i].addr, ls[j].key, ls[j].addr))
				break
			}
		}
	}
	return w
}
