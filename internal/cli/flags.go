package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlags returns a flag set that prints its help to stdout on --help and
// reports mistakes as usage errors.
func newFlags(name, synopsis string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: idemgate %s\n\nFlags:\n", synopsis)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parseFlags parses args, allowing flags after positional arguments, and
// returns the positional ones.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				// Parse has printed the help (fs.Usage) already.
				return nil, errHelp
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
		if len(args) == 0 || !strings.HasPrefix(args[0], "-") {
			// keep collecting positionals until the next flag
			for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
				positional = append(positional, args[0])
				args = args[1:]
			}
			if len(args) == 0 {
				return positional, nil
			}
		}
	}
}
