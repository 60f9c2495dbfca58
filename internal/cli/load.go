package cli

import (
	"errors"
	"flag"
	"io"
	"log/slog"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/extension"
)

// loadCommand parses a command's flags (--config, --log-format,
// --log-level and moreFlags), loads the file and makes the logger.
func loadCommand(ext extension.Set, name string, args []string, getenv func(string) string, stdout, stderr io.Writer, moreFlags ...func(*flag.FlagSet)) (*config.Config, *slog.Logger, error) {
	fs := newConfigFlags(name, name+" --config FILE", stdout)
	logFormat := fs.String("log-format", "", "json or text: overrides log.format")
	logLevel := fs.String("log-level", "", "debug, info, warn or error: overrides log.level")
	for _, f := range moreFlags {
		f(fs.FlagSet)
	}
	if _, err := fs.parseArgs(args); err != nil {
		return nil, nil, err
	}
	switch *logFormat {
	case "", "json", "text":
	default:
		return nil, nil, usagef("--log-format %q: want json or text", *logFormat)
	}
	switch *logLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return nil, nil, usagef("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	cfg, err := fs.load(ext, getenv, name == "worker" || name == "dev")
	if err != nil {
		return nil, nil, err
	}
	if *logFormat != "" {
		cfg.Log.Format = *logFormat
	}
	if *logLevel != "" {
		cfg.Log.Level = *logLevel
	}
	logger := newLogger(cfg, stderr)
	takeProcessLogs(logger, stderr)
	for _, w := range cfg.Warnings() {
		logger.Warn("configuration: " + w)
	}
	return cfg, logger, nil
}

// configFlags are the flags of a command that reads the configuration
// file: --config, and the command's own added to the embedded set.
type configFlags struct {
	*flag.FlagSet
	path *string
}

func newConfigFlags(name, synopsis string, stdout io.Writer) configFlags {
	fs := newFlags(name, synopsis, stdout)
	return configFlags{FlagSet: fs, path: fs.String("config", "", "configuration file (YAML)")}
}

// parseArgs is parseFlags: it returns the positional arguments. A command
// checks them before load, so that a mistaken command line is reported as
// such rather than as a missing --config.
func (f configFlags) parseArgs(args []string) ([]string, error) { return parseFlags(f.FlagSet, args) }

// load reads the file --config names (loadConfig).
func (f configFlags) load(ext extension.Set, getenv func(string) string, runsJobs bool) (*config.Config, error) {
	return loadConfig(ext, *f.path, getenv, runsJobs)
}

// loadConfig reads the file named by --config. Every problem in it is a
// usage error (exit 2), printed one per line. ext's job declarations are
// those of routes that name their tasks without declaring them
// (idemgate-examples: configurations written before jobs were declared).
// runsJobs says the command runs the declared jobs, so each needs
// deliver.http or a Go handler of this binary.
func loadConfig(ext extension.Set, path string, getenv func(string) string, runsJobs bool) (*config.Config, error) {
	if path == "" {
		return nil, usagef("--config FILE is required")
	}
	opts := []config.Option{config.WithSettings(ext.Settings...)}
	for _, doc := range ext.Jobs {
		opts = append(opts, config.WithDefaultJobs(doc))
	}
	if runsJobs {
		opts = append(opts, config.WithHandlers(ext.Tasks()...))
	}
	cfg, err := config.Load(path, getenv, opts...)
	if err != nil {
		var errs *config.Errors
		if errors.As(err, &errs) {
			return nil, usagef("invalid configuration:\n%s", errs.Error())
		}
		return nil, usagef("%v", err)
	}
	return cfg, nil
}
