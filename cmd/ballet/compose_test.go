package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/balletplanner/ballet/gateway"
)

// composeFile is the part of docker-compose.yml the tests look at.
type composeFile struct {
	XBallet  any                       `yaml:"x-ballet"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Restart     string            `yaml:"restart"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []composeMount    `yaml:"ports"`
	Volumes     []composeMount    `yaml:"volumes"`
	Healthcheck *struct {
		Test        []string `yaml:"test"`
		Interval    string   `yaml:"interval"`
		Timeout     string   `yaml:"timeout"`
		StartPeriod string   `yaml:"start_period"`
		Retries     int      `yaml:"retries"`
		Disable     bool     `yaml:"disable"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// composeMount is a port ("127.0.0.1:8080:8080") or a volume
// ("redisdata:/data") in short syntax; a loader's long syntax is turned
// into the short one.
type composeMount string

func (m *composeMount) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*m = composeMount(n.Value)
		return nil
	}
	var long struct {
		HostIP    string `yaml:"host_ip"`
		Published string `yaml:"published"`
		Target    string `yaml:"target"`
		Source    string `yaml:"source"`
	}
	if err := n.Decode(&long); err != nil {
		return err
	}
	if long.Source != "" {
		*m = composeMount(long.Source + ":" + long.Target)
	} else {
		*m = composeMount(long.HostIP + ":" + long.Published + ":" + long.Target)
	}
	return nil
}

var composeVar = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?:(:?[-?])([^}]*))?\}`)

// interpolate resolves ${VAR}, ${VAR:-default} and ${VAR:?message} from env
// as Compose does; a required variable that is missing is an error.
func interpolate(text string, env map[string]string) (string, error) {
	var missing []string
	out := composeVar.ReplaceAllStringFunc(text, func(ref string) string {
		m := composeVar.FindStringSubmatch(ref)
		v, set := env[m[1]]
		switch {
		case set && (v != "" || !strings.HasPrefix(m[2], ":")):
			return v
		case strings.HasSuffix(m[2], "?"):
			missing = append(missing, m[1]+": "+m[3])
		case strings.HasSuffix(m[2], "-"):
			return m[3]
		}
		return ""
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("required: %s", strings.Join(missing, "; "))
	}
	return out, nil
}

func loadCompose(t *testing.T, text []byte, strict bool) composeFile {
	t.Helper()
	var f composeFile
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(strict)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return f
}

func readRepoFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../" + path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testKey() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// ballets are the services that run the ballet image.
var ballets = []string{"migrate", "demo", "api", "worker", "gateway"}

// checkCompose asserts what docker-compose.yml promises of a loaded file.
func checkCompose(t *testing.T, f composeFile, key string) {
	t.Helper()
	var names []string
	for n := range f.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"api", "demo", "gateway", "migrate", "postgres", "redis", "worker"}; !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
	m := f.Services["migrate"]
	if !slices.Equal(m.Command, []string{"migrate", "up"}) || m.Restart != "no" || m.DependsOn["postgres"].Condition != "service_healthy" {
		t.Errorf("migrate: command %v, restart %q, depends_on %v; want migrate up, once, after a healthy postgres", m.Command, m.Restart, m.DependsOn)
	}
	if d := f.Services["demo"]; !slices.Equal(d.Command, []string{"demo"}) || d.Restart != "no" {
		t.Errorf("demo: command %v, restart %q; want demo, once", d.Command, d.Restart)
	}
	for _, name := range ballets {
		s := f.Services[name]
		if s.Image != "ballet:dev" {
			t.Errorf("%s: image %q, want ballet:dev", name, s.Image)
		}
		if name != "migrate" && s.DependsOn["migrate"].Condition != "service_completed_successfully" {
			t.Errorf("%s: depends_on %v, want migrate: service_completed_successfully", name, s.DependsOn)
		}
		if got := s.Environment["BALLET_GATEWAY_SIGNING_KEY"]; got != key {
			t.Errorf("%s: BALLET_GATEWAY_SIGNING_KEY %q, want the one given (%q)", name, got, key)
		}
		if name == "migrate" || name == "demo" {
			continue
		}
		h := s.Healthcheck
		if h == nil || h.Disable || len(h.Test) < 3 || h.Test[0] != "CMD" || !strings.HasSuffix(h.Test[1], "/ballet") || h.Test[2] != "healthcheck" {
			t.Errorf("%s: healthcheck %+v, want CMD …/ballet healthcheck", name, h)
		}
		if s.Environment["BALLET_DATABASE_MIGRATE"] != "false" {
			t.Errorf("%s: BALLET_DATABASE_MIGRATE %q, want false (migrate alone migrates)", name, s.Environment["BALLET_DATABASE_MIGRATE"])
		}
	}
	for name, s := range f.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(string(p), "127.0.0.1:") {
				t.Errorf("%s: port %q is published beyond 127.0.0.1", name, p)
			}
		}
	}
	redisVolume := false
	for _, v := range f.Services["redis"].Volumes {
		src, target, _ := strings.Cut(string(v), ":")
		_, named := f.Volumes[src]
		redisVolume = redisVolume || (named && strings.HasPrefix(target, "/data"))
	}
	if !redisVolume {
		t.Errorf("redis: volumes %v, want a named volume on /data (top-level volumes %v)", f.Services["redis"].Volumes, f.Volumes)
	}
	password := f.Services["postgres"].Environment["POSTGRES_PASSWORD"]
	if password == "" {
		t.Fatal("postgres: no POSTGRES_PASSWORD")
	}
	urls := 0
	for name, s := range f.Services {
		for k, v := range s.Environment {
			if u, err := url.Parse(v); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
				urls++
				if p, _ := u.User.Password(); p != password {
					t.Errorf("%s: %s has password %q, postgres has %q", name, k, p, password)
				}
			}
		}
	}
	if urls < len(ballets) {
		t.Errorf("%d Postgres URLs, want one in each of %v", urls, ballets)
	}
}

// TestDockerCompose checks docker-compose.yml, decoded strictly (an unknown
// key fails): migrate runs once before everything else, demo prints a token,
// ports listen on 127.0.0.1, one Postgres password, Redis data in a volume,
// healthchecks by `ballet healthcheck`, no built-in signing key, and no
// variable that every command requires.
func TestDockerCompose(t *testing.T) {
	t.Parallel()
	raw := readRepoFile(t, "docker-compose.yml")
	key := testKey()
	text, err := interpolate(string(raw), map[string]string{"BALLET_GATEWAY_SIGNING_KEY": key})
	if err != nil {
		t.Fatal(err)
	}
	checkCompose(t, loadCompose(t, []byte(text), true), key)

	// Without the key the file still loads (`docker compose logs` and
	// `down` load it too), giving the key as empty: the worker and the
	// gateway refuse that (TestComposeWithoutSigningKey).
	if text, err := interpolate(string(raw), nil); err != nil {
		t.Errorf("without BALLET_GATEWAY_SIGNING_KEY: %v; want the file to load", err)
	} else {
		checkCompose(t, loadCompose(t, []byte(text), true), "")
	}
	for _, m := range composeVar.FindAllStringSubmatch(string(raw), -1) {
		if strings.HasSuffix(m[2], "?") {
			t.Errorf("${%s%s%s} makes every docker compose command fail without %s", m[1], m[2], m[3], m[1])
		}
		if strings.HasSuffix(m[1], "_KEY") && strings.HasSuffix(m[2], "-") {
			if err := gateway.RefusePlaceholder(m[1], m[3]); err != nil || (m[1] == "BALLET_GATEWAY_SIGNING_KEY" && m[3] != "") {
				t.Errorf("%s defaults to %q: a key must be given, not built in", m[1], m[3])
			}
		}
	}
	// The password is the dev password of the Makefile's URLs and services.sh.
	password := loadCompose(t, []byte(text), true).Services["postgres"].Environment["POSTGRES_PASSWORD"]
	for _, u := range regexp.MustCompile(`postgres://[^\s"']+`).FindAll(readRepoFile(t, "Makefile"), -1) {
		if pu, err := url.Parse(string(u)); err != nil || func() string { p, _ := pu.User.Password(); return p }() != password {
			t.Errorf("Makefile URL %s: want the password %q of docker-compose.yml", u, password)
		}
	}
	if !bytes.Contains(readRepoFile(t, "deploy/dev/services.sh"), []byte("\nPG_PASSWORD="+password+"\n")) {
		t.Errorf("deploy/dev/services.sh: want PG_PASSWORD=%s, the password of docker-compose.yml", password)
	}
}

// composeLoader is the Compose command on this machine: docker-compose or
// the docker compose plugin.
func composeLoader() []string {
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	if p, err := exec.LookPath("docker"); err == nil && exec.Command(p, "compose", "version").Run() == nil {
		return []string{p, "compose"}
	}
	return nil
}

// TestDockerComposeLoader runs the machine's Compose loader (`config`) on
// docker-compose.yml and checks what it resolved, with the signing key and
// without it: `logs`, `ps` and `down` load the file the same way, and must
// not need the key that only the worker and the gateway use.
func TestDockerComposeLoader(t *testing.T) {
	t.Parallel()
	loader := composeLoader()
	if loader == nil {
		t.Fatal("neither docker-compose nor docker compose is installed: `make test` installs it (deploy/dev/services.sh compose)")
	}
	run := func(env ...string) (string, string, error) {
		cmd := exec.Command(loader[0], append(loader[1:], "-f", "../../docker-compose.yml", "config")...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "BALLET_") && !strings.HasPrefix(kv, "PGPORT=") && !strings.HasPrefix(kv, "REDIS_PORT=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	key := testKey()
	out, stderr, err := run("BALLET_GATEWAY_SIGNING_KEY=" + key)
	if err != nil {
		t.Fatalf("%v config: %v\n%s", loader, err, stderr)
	}
	checkCompose(t, loadCompose(t, []byte(out), false), key)
	out, stderr, err = run()
	if err != nil {
		t.Fatalf("%v config without BALLET_GATEWAY_SIGNING_KEY: %v\n%s", loader, err, stderr)
	}
	checkCompose(t, loadCompose(t, []byte(out), false), "")
}

// TestComposeWithoutSigningKey: what compose gives the worker and the
// gateway without BALLET_GATEWAY_SIGNING_KEY, an empty key, stops them
// before they connect to anything, saying which key is missing and how to
// make one; the other commands run without it.
func TestComposeWithoutSigningKey(t *testing.T) {
	t.Parallel()
	for _, command := range []string{"worker", "gateway"} {
		_, stderr, code := ballet(t, []string{"BALLET_GATEWAY_SIGNING_KEY="}, command)
		if code == 0 || !strings.Contains(stderr, "gateway.signing_key: required when the worker and the gateway run as separate processes") ||
			!strings.Contains(stderr, "BALLET_GATEWAY_SIGNING_KEY=$(openssl rand -base64 32)") {
			t.Errorf("ballet %s without a signing key: exit %d, stderr %q; want a refusal naming the key and how to make one", command, code, stderr)
		}
	}
	if out, stderr, code := ballet(t, []string{"BALLET_GATEWAY_SIGNING_KEY="}, "config", "print"); code != 0 || !strings.Contains(out, `signing_key = ""`) {
		t.Errorf("config print without a signing key: exit %d, stderr %q", code, stderr)
	}
}
