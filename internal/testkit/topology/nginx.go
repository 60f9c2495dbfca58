package topology

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testkit/proc"
)

// Nginx is a private nginx: a master process in the foreground with one
// worker, its configuration, logs and temporary files in a directory of
// its own.
type Nginx struct {
	// URL is http://127.0.0.1:Port.
	URL  string
	Port int
	// Dir is nginx's prefix: nginx.conf, site.conf, error.log, access.log.
	Dir string
	p   *proc.Proc
}

// StartNginx starts nginx with site as the contents of its http block;
// site must listen on 127.0.0.1:port. The access log records, for each
// request, which gateways nginx tried ($upstream_addr) and what each
// answered. nginx is stopped when the test ends, and its error log shown
// if the test failed.
func StartNginx(t testing.TB, port int, site string) *Nginx {
	t.Helper()
	bin := Binary(t, "nginx")
	dir := t.TempDir()
	n := &Nginx{URL: "http://127.0.0.1:" + strconv.Itoa(port), Port: port, Dir: dir}
	in := func(name string) string { return filepath.Join(dir, name) }
	// Running as root, nginx would switch its worker to nobody, who may
	// not write in the test's directory; otherwise user is ignored.
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n"
	}
	conf := fmt.Sprintf(`daemon off;
master_process on;
worker_processes 1;
%spid %s;
error_log %s notice;
events { worker_connections 1024; }
http {
    log_format upstreams '$request_method $uri $status upstream=$upstream_addr upstream_status=$upstream_status time=$request_time';
    access_log %s upstreams;
    client_body_temp_path %s;
    proxy_temp_path %s;
    fastcgi_temp_path %s;
    uwsgi_temp_path %s;
    scgi_temp_path %s;
    include %s;
}
`, user, in("nginx.pid"), in("error.log"), in("access.log"),
		in("client_body"), in("proxy"), in("fastcgi"), in("uwsgi"), in("scgi"), in("site.conf"))
	for name, text := range map[string]string{"nginx.conf": conf, "site.conf": site} {
		if err := os.WriteFile(in(name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	log, err := os.Create(in("nginx.out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	// -e: the error log before nginx.conf is read, which would otherwise
	// be the system's.
	args := []string{"-p", dir, "-c", in("nginx.conf"), "-e", in("error.log")}
	check := exec.CommandContext(t.Context(), bin, append(args, "-t")...)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("topology: nginx refuses its configuration: %v\n%s\nsite.conf:\n%s", err, out, site)
	}
	n.p, err = proc.Start(proc.Spec{Name: "nginx", Path: bin, Args: args, Env: proc.ChildEnv(), Dir: dir, Log: log})
	if err != nil {
		t.Fatalf("topology: %v", err)
	}
	t.Cleanup(func() {
		// SIGQUIT: finish the requests in flight, as in production.
		n.p.Stop(syscall.SIGQUIT, 10*time.Second)
		if t.Failed() {
			t.Logf("nginx error log:\n%s", n.logTail("error.log", 40))
		}
	})
	err = proc.WaitUntil(t.Context(), 15*time.Second, "nginx listening", n.p, func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		t.Fatalf("topology: %v\n%s", err, n.logTail("error.log", 20))
	}
	return n
}

// ErrorLog is nginx's error log so far.
func (n *Nginx) ErrorLog() string { return n.logTail("error.log", 0) }

// AccessLog is nginx's access log so far, one line a request.
func (n *Nginx) AccessLog() string { return n.logTail("access.log", 0) }

// PassedOn counts the requests so far that nginx sent to more than one
// upstream server, because the first failed ($upstream_addr lists each
// server tried, comma-separated).
func (n *Nginx) PassedOn() int {
	count := 0
	for line := range strings.Lines(n.AccessLog()) {
		_, tried, _ := strings.Cut(line, " upstream=")
		tried, _, _ = strings.Cut(tried, " upstream_status=")
		if strings.Contains(tried, ",") {
			count++
		}
	}
	return count
}

// logTail is the last lines lines of the log file name (all of it for 0).
func (n *Nginx) logTail(name string, lines int) string {
	b, err := os.ReadFile(filepath.Join(n.Dir, name))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if lines > 0 && len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
