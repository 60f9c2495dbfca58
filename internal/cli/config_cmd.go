package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/idemgate/idemgate/extension"
)

func runConfig(_ context.Context, ext extension.Set, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newConfigFlags("config", "config check --config FILE", stdout)
	pos, err := fs.parseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "check" {
		fs.Usage()
		return usagef("config: want the subcommand check")
	}
	cfg, err := fs.load(ext, getenv, true)
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stderr, "warning:", w)
	}
	fmt.Fprintf(stdout, "%s: ok (%d routes, %d jobs, %d tenants, store %s)\n", *fs.path, len(cfg.Routes), len(cfg.Jobs()), len(cfg.Tenants), cfg.Store)
	return nil
}
