package cli

import (
	"log/slog"
	"syscall"
)

// maxInFlight is server.max_in_flight lowered, with a warning, to what the
// process's limit on open files allows. A request in hand holds two
// descriptors, its connection and one to the upstream; a quarter of the
// limit is left for what the count does not see: idle keep-alive
// connections, the store's and the queue's pools, the listeners. Past the
// limit accept and dial fail with EMFILE, for every request rather than the
// excess, which is what shedding is for. nofile is 0 where the limit is
// unknown.
func maxInFlight(configured int, nofile uint64, logger *slog.Logger) int {
	if nofile == 0 {
		return configured
	}
	allowed := max(int(min((nofile-nofile/4)/2, 1<<30)), 1)
	if configured <= allowed {
		return configured
	}
	logger.Warn("server.max_in_flight lowered to what the open-file limit allows (two descriptors per request, a quarter kept for idle connections and pools); raise the limit (ulimit -n, LimitNOFILE) to allow more",
		"configured", configured, "max_in_flight", allowed, "open_file_limit", nofile)
	return allowed
}

// openFileLimit is the process's soft RLIMIT_NOFILE, which the Go runtime
// raised to the hard limit at start; 0 when it cannot be read.
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}
