package manifests

import (
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, …
	args string
}

func parseDockerfile(t *testing.T) []instruction {
	t.Helper()
	var (
		out  []instruction
		cont strings.Builder
	)
	for _, line := range strings.Split(string(readRepoFile(t, "Dockerfile")), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cont.Len() == 0) {
			continue
		}
		if rest, ok := strings.CutSuffix(trimmed, `\`); ok {
			cont.WriteString(rest + " ")
			continue
		}
		cont.WriteString(trimmed)
		full := strings.TrimSpace(cont.String())
		cont.Reset()
		if full == "" {
			continue
		}
		cmd, args, _ := strings.Cut(full, " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
	}
	return out
}

// stage is the instructions from one FROM to the next.
type stage struct {
	from string // the image, ARGs substituted
	name string
	ins  []instruction
}

func dockerStages(t *testing.T) []stage {
	t.Helper()
	args := map[string]string{}
	var stages []stage
	for _, in := range parseDockerfile(t) {
		switch {
		case in.cmd == "ARG" && len(stages) == 0:
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			img := regexp.MustCompile(`\$\{?(\w+)\}?`).ReplaceAllStringFunc(f[0], func(ref string) string {
				return args[strings.Trim(ref, "${}")]
			})
			s := stage{from: img}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
		case len(stages) > 0:
			stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a final stage", len(stages))
	}
	return stages
}

// makeBuildCommands are the recipe lines of the Makefile's build target,
// with $(GO) as go.
func makeBuildCommands(t *testing.T) []string {
	t.Helper()
	var cmds []string
	in := false
	for _, line := range strings.Split(string(readRepoFile(t, "Makefile")), "\n") {
		switch {
		case strings.HasPrefix(line, "build:"):
			in = true
		case in && strings.HasPrefix(line, "\t"):
			cmds = append(cmds, strings.Join(strings.Fields(strings.ReplaceAll(line, "$(GO)", "go")), " "))
		case in:
			in = false
		}
	}
	if len(cmds) == 0 {
		t.Fatal("Makefile: no build target")
	}
	return cmds
}

// TestDockerfileBuildsWhatMakeBuilds: the image is built by the same
// `go build` commands as `make build`, statically and without build paths.
func TestDockerfileBuildsWhatMakeBuilds(t *testing.T) {
	t.Parallel()
	build := dockerStages(t)[0]
	var got []string
	env := map[string]string{}
	for _, in := range build.ins {
		switch in.cmd {
		case "ENV":
			for _, kv := range strings.Fields(in.args) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
		case "RUN":
			for _, part := range regexp.MustCompile(`&&|;`).Split(in.args, -1) {
				var words []string
				for _, w := range strings.Fields(part) {
					if !strings.HasPrefix(w, "--mount=") {
						words = append(words, w)
					}
				}
				if len(words) >= 2 && words[0] == "go" && words[1] == "build" {
					got = append(got, strings.Join(words, " "))
				}
			}
		}
	}
	if want := makeBuildCommands(t); !slices.Equal(got, want) {
		t.Errorf("the Dockerfile builds with\n  %s\nbut make build runs\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if env["CGO_ENABLED"] != "0" {
		t.Errorf("the build stage has CGO_ENABLED=%q, want 0: the final image has no C library", env["CGO_ENABLED"])
	}
	if !slices.Contains(strings.Fields(env["GOFLAGS"]), "-trimpath") {
		t.Errorf("the build stage's GOFLAGS %q lacks -trimpath", env["GOFLAGS"])
	}
}

// TestDockerfileGoVersion: the build stage's Go is go.mod's.
func TestDockerfileGoVersion(t *testing.T) {
	t.Parallel()
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(readRepoFile(t, "go.mod"))
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	from := dockerStages(t)[0].from
	repo, tag, _ := strings.Cut(from, ":")
	if repo != "golang" {
		t.Fatalf("the build stage is FROM %s, want the official golang image", from)
	}
	if v := regexp.MustCompile(`^\d+\.\d+`).FindString(tag); v != string(m[1]) {
		t.Errorf("the build stage is FROM %s (Go %s), but go.mod says go %s", from, v, m[1])
	}
}

// dockerfileUser is the numeric user of the final stage.
func dockerfileUser(t *testing.T) int64 {
	t.Helper()
	stages := dockerStages(t)
	for _, in := range stages[len(stages)-1].ins {
		if in.cmd == "USER" {
			user, _, _ := strings.Cut(in.args, ":")
			uid, err := strconv.ParseInt(user, 10, 64)
			if err != nil {
				t.Fatalf("Dockerfile: USER %s is not numeric, so Kubernetes cannot check runAsNonRoot", in.args)
			}
			return uid
		}
	}
	t.Fatal("Dockerfile: the final stage sets no USER")
	return 0
}

// imageBinaries are the files the final stage copies into its PATH
// directory, and the ENTRYPOINT.
func imageBinaries(t *testing.T) (bins []string, entrypoint []string) {
	t.Helper()
	stages := dockerStages(t)
	for _, in := range stages[len(stages)-1].ins {
		switch in.cmd {
		case "COPY":
			f := strings.Fields(in.args)
			var srcs []string
			for _, w := range f[:len(f)-1] {
				if !strings.HasPrefix(w, "--") {
					srcs = append(srcs, w)
				}
			}
			dst := f[len(f)-1]
			for _, s := range srcs {
				bins = append(bins, path.Join(dst, path.Base(s)))
			}
		case "ENTRYPOINT":
			if err := yaml.Unmarshal([]byte(in.args), &entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s is not the exec form: %v", in.args, err)
			}
		}
	}
	return bins, entrypoint
}

// TestDockerfileFinalStage: no shell needed, not root, idemgate as the
// entry point, and the ports the container configurations listen on.
func TestDockerfileFinalStage(t *testing.T) {
	t.Parallel()
	stages := dockerStages(t)
	final := stages[len(stages)-1]
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") {
		t.Errorf("the final stage is FROM %s, want a distroless static image", final.from)
	}
	if uid := dockerfileUser(t); uid == 0 {
		t.Errorf("the final stage runs as root")
	}
	bins, entry := imageBinaries(t)
	if len(entry) != 1 || path.Base(entry[0]) != "idemgate" || !slices.Contains(bins, entry[0]) {
		t.Errorf("ENTRYPOINT %v, want the idemgate binary the image copies (%v)", entry, bins)
	}
	// Every built binary is copied, and nothing else.
	var built []string
	for _, c := range makeBuildCommands(t) {
		if f := strings.Fields(c); slices.Contains(f, "-o") {
			built = append(built, path.Base(f[slices.Index(f, "-o")+1]))
		}
	}
	var copied []string
	for _, b := range bins {
		copied = append(copied, path.Base(b))
	}
	if !slices.Equal(copied, built) {
		t.Errorf("the image holds %v, make build builds %v", copied, built)
	}

	var exposed []int
	for _, in := range final.ins {
		if in.cmd == "EXPOSE" {
			for _, p := range strings.Fields(in.args) {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Fatalf("EXPOSE %s", in.args)
				}
				exposed = append(exposed, n)
			}
		}
	}
	slices.Sort(exposed)
	conf := parseConfig(t, []byte(mustConfigMapFile(t)))
	want := []int{
		containerPort(t, "listen", conf.listen),
		containerPort(t, "admin_listen", conf.adminListen),
		containerPort(t, "worker.admin_listen", conf.workerAdminListen),
	}
	slices.Sort(want)
	if !slices.Equal(exposed, want) {
		t.Errorf("EXPOSE %v, but the container configuration listens on %v", exposed, want)
	}
}

func mustConfigMapFile(t *testing.T) string {
	t.Helper()
	return string(readRepoFile(t, "deploy/kubernetes/base/idemgate.yaml"))
}

// TestDockerignoreKeepsTheBuild: nothing `go build` reads for the three
// binaries — Go files and embedded files of the module's packages, go.mod,
// go.sum — is excluded from the build context.
func TestDockerignoreKeepsTheBuild(t *testing.T) {
	t.Parallel()
	var patterns []string
	for _, line := range strings.Split(string(readRepoFile(t, ".dockerignore")), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	args := []string{"list", "-deps", "-f", `{{if .Module}}{{if eq .Module.Path "github.com/idemgate/idemgate"}}{{.Dir}}|{{join .GoFiles ","}}|{{join .EmbedFiles ","}}{{end}}{{end}}`}
	for _, c := range makeBuildCommands(t) {
		f := strings.Fields(c)
		args = append(args, f[len(f)-1])
	}
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = repoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	files := []string{"go.mod", "go.sum"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		parts := strings.Split(line, "|")
		dir := strings.TrimPrefix(strings.TrimPrefix(parts[0], repoRoot()), "/")
		for _, list := range parts[1:] {
			for _, f := range strings.Split(list, ",") {
				if f != "" {
					files = append(files, path.Join(dir, f))
				}
			}
		}
	}
	if len(files) < 10 {
		t.Fatalf("go list found only %v", files)
	}
	for _, f := range files {
		if p := dockerignored(patterns, f); p != "" {
			t.Errorf(".dockerignore pattern %q excludes %s, which the build needs", p, f)
		}
	}
}

// dockerignored is the pattern that excludes a path of the build context,
// or "". It follows the rules .dockerignore uses (patterns relative to the
// context's root, "**" for any number of directories, a pattern that
// names a directory excluding what is under it, "!" re-including), which
// is enough for the file this repository has.
func dockerignored(patterns []string, file string) string {
	excluded := ""
	for _, p := range patterns {
		negate := strings.HasPrefix(p, "!")
		p = path.Clean(strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/"))
		if matchesIgnore(p, file) {
			if negate {
				excluded = ""
			} else {
				excluded = p
			}
		}
	}
	return excluded
}

func matchesIgnore(pattern, file string) bool {
	pp, fp := strings.Split(pattern, "/"), strings.Split(file, "/")
	var match func(pp, fp []string) bool
	match = func(pp, fp []string) bool {
		if len(pp) == 0 {
			return true // the pattern named a directory above the file, or the file
		}
		if pp[0] == "**" {
			for i := 0; i <= len(fp); i++ {
				if match(pp[1:], fp[i:]) {
					return true
				}
			}
			return false
		}
		if len(fp) == 0 {
			return false
		}
		ok, err := path.Match(pp[0], fp[0])
		return err == nil && ok && match(pp[1:], fp[1:])
	}
	return match(pp, fp)
}
