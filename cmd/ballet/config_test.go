package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestLoadConfigLayers(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "[planner]\nmax_rounds = 7\nmodel = \"from-file\"\n[server]\nshutdown_timeout = \"3s\"\n")
	cfg, err := LoadConfig(path, []string{"BALLET_PLANNER_MODEL=from-env", "BALLET_REDIS_CLUSTER_ADDRS=a:1, b:2", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Planner.MaxRounds != 7 {
		t.Errorf("max_rounds %d, want 7 from the file", cfg.Planner.MaxRounds)
	}
	if cfg.Planner.Model != "from-env" {
		t.Errorf("model %q, want the environment to win", cfg.Planner.Model)
	}
	if cfg.Server.ShutdownTimeout != 3*time.Second {
		t.Errorf("shutdown_timeout %v", cfg.Server.ShutdownTimeout)
	}
	if got := strings.Join(cfg.Redis.ClusterAddrs, "|"); got != "a:1|b:2" {
		t.Errorf("cluster_addrs %q", got)
	}
	if cfg.Planner.MaxTokens != 8192 || cfg.Planner.Skill != "planner" || cfg.Planner.CompactAtTokens != 100000 {
		t.Errorf("defaults lost: %+v", cfg.Planner)
	}
}

// TestLoadConfigOwnership: the queue caps are the api's ([server]) and each
// service has its own shutdown timeout, set apart from the other's.
func TestLoadConfigOwnership(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "[server]\nmax_queued_turns = 7\nshutdown_timeout = \"3s\"\n[worker]\nshutdown_timeout = \"40s\"\n")
	cfg, err := LoadConfig(path, []string{"BALLET_SERVER_MAX_QUEUED_TURNS_PER_PROJECT=2", "BALLET_SERVER_MAX_QUEUED_TURNS_PER_ORGANIZATION=4"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Server.QueueLimits(); got.Total != 7 || got.PerProject != 2 || got.PerOrganization != 4 {
		t.Errorf("queue limits %+v, want 7 in all, 2 per project and 4 per organization", got)
	}
	if cfg.Server.ShutdownTimeout != 3*time.Second || cfg.Worker.ShutdownTimeout != 40*time.Second {
		t.Errorf("shutdown timeouts: server %v, worker %v; want 3s and 40s", cfg.Server.ShutdownTimeout, cfg.Worker.ShutdownTimeout)
	}
	def := DefaultConfig()
	if got := def.Server.QueueLimits(); got.Total != 10000 || got.PerProject != 1000 || got.PerOrganization != 5000 || def.Worker.ShutdownTimeout != 10*time.Second {
		t.Errorf("defaults: queue limits %+v, worker.shutdown_timeout %v", got, def.Worker.ShutdownTimeout)
	}
}

// TestMovedKeysNameRealKeys: every moved key's new name is a key of the
// configuration and its old name is not, so the message never points at
// a key that would be refused too.
func TestMovedKeysNameRealKeys(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	known := map[string]bool{}
	for _, f := range fields(&cfg) {
		known[f.key] = true
	}
	for from, to := range movedKeys {
		if known[from] || !known[to] {
			t.Errorf("%s moved to %s: the old key is known %v, the new key is known %v", from, to, known[from], known[to])
		}
	}
}

func TestLoadConfigRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		env  []string
		want string
	}{
		{"unknown key", "[planner]\nmax_round = 3\n", nil, "unknown key planner.max_round"},
		{"unknown section", "[planer]\nmodel = \"x\"\n", nil, "unknown key planer"},
		{"wrong type", "[planner]\nmax_rounds = \"many\"\n", nil, "planner.max_rounds"},
		{"invalid value", "[planner]\nmax_rounds = 0\n", nil, "planner.max_rounds: must be at least 1, got 0"},
		{"negative compaction", "[planner]\ncompact_at_tokens = -1\n", nil, "planner.compact_at_tokens"},
		{"empty model", "[planner]\nmodel = \"\"\n", nil, "planner.model: must not be empty"},
		{"bad duration", "[server]\nshutdown_timeout = \"soon\"\n", nil, "server.shutdown_timeout"},
		{"bad log level", "[log]\nlevel = \"loud\"\n", nil, "log.level"},
		{"malformed toml", "[planner\n", nil, "expected"},
		{"unknown env", "", []string{"BALLET_PLANNER_MAX_ROUND=3"}, "unknown environment variable BALLET_PLANNER_MAX_ROUND"},
		{"env wrong type", "", []string{"BALLET_PLANNER_MAX_ROUNDS=many"}, "planner.max_rounds (BALLET_PLANNER_MAX_ROUNDS): must be an integer"},
		{"env invalid", "", []string{"BALLET_PLANNER_MAX_ROUNDS=0"}, "planner.max_rounds: must be at least 1"},
		{"local auth beyond loopback", "[auth]\nmode = \"local\"\n", nil, "auth.mode"},
		{"bad redis url", "[redis]\nurl = \"http://x\"\n", nil, "redis.url"},
		{"bad metrics addr", "[metrics]\naddr = \"8083\"\n", nil, "metrics.addr: must be host:port"},
		{"short metrics token", "", []string{"BALLET_METRICS_TOKEN=short"}, "metrics.token: must be at least 16 characters"},
		{"metrics token with a space", "", []string{"BALLET_METRICS_TOKEN=0123456789 abcdef"}, "metrics.token: must be at least 16 characters without spaces"},
		{"moved key", "[worker]\nmax_queued_turns = 5\n", nil, "worker.max_queued_turns moved to server.max_queued_turns"},
		{"moved key beside an unknown one", "[worker]\nmax_queued_turns_per_project = 5\nconcurency = 3\n", nil,
			"worker.max_queued_turns_per_project moved to server.max_queued_turns_per_project; unknown key worker.concurency"},
		{"moved env", "", []string{"BALLET_WORKER_MAX_QUEUED_TURNS=5"},
			"environment variable BALLET_WORKER_MAX_QUEUED_TURNS: worker.max_queued_turns moved to server.max_queued_turns; set BALLET_SERVER_MAX_QUEUED_TURNS"},
		{"moved env per project", "", []string{"BALLET_WORKER_MAX_QUEUED_TURNS_PER_PROJECT=5"},
			"worker.max_queued_turns_per_project moved to server.max_queued_turns_per_project; set BALLET_SERVER_MAX_QUEUED_TURNS_PER_PROJECT"},
		{"no queued turns", "[server]\nmax_queued_turns = 0\n", nil, "server.max_queued_turns: must be at least 1, got 0"},
		{"no queued turns per project", "", []string{"BALLET_SERVER_MAX_QUEUED_TURNS_PER_PROJECT=0"}, "server.max_queued_turns_per_project: must be at least 1, got 0"},
		{"no queued turns per organization", "[server]\nmax_queued_turns_per_organization = 0\n", nil, "server.max_queued_turns_per_organization: must be at least 1, got 0"},
		{"negative queued turns per organization env", "", []string{"BALLET_SERVER_MAX_QUEUED_TURNS_PER_ORGANIZATION=-1"}, "server.max_queued_turns_per_organization: must be at least 1, got -1"},
		{"no worker drain", "[worker]\nshutdown_timeout = \"0s\"\n", nil, "worker.shutdown_timeout: must be positive"},
		{"negative completed retention", "[worker]\ncompleted_retention = \"-1m\"\n", nil, "worker.completed_retention: must be 0-24h0m0s, got -1m0s"},
		{"completed retention too long", "", []string{"BALLET_WORKER_COMPLETED_RETENTION=25h"}, "worker.completed_retention: must be 0-24h0m0s, got 25h0m0s"},
		{"negative stream recheck", "[server]\nstream_recheck = \"-1s\"\n", nil, "server.stream_recheck: must be positive, got -1s"},
		{"no embed batch", "[search]\nembed_batch = 0\n", nil, "search.embed_batch: must be 1-2048, got 0"},
		{"embed batch too large", "", []string{"BALLET_SEARCH_EMBED_BATCH=4096"}, "search.embed_batch: must be 1-2048, got 4096"},
		{"no embed concurrency", "[search]\nembed_concurrency = 0\n", nil, "search.embed_concurrency: must be 1-256, got 0"},
		{"negative embed delay", "[search]\nembed_delay = \"-1s\"\n", nil, "search.embed_delay: must be 0-1h0m0s, got -1s"},
		{"bad embed delay", "", []string{"BALLET_SEARCH_EMBED_DELAY=soon"}, "search.embed_delay (BALLET_SEARCH_EMBED_DELAY): must be a duration"},
		{"negative embed retries", "[search]\nembed_max_retry = -1\n", nil, "search.embed_max_retry: must be 0-100, got -1"},
		{"unknown search key", "[search]\nembedding_model = \"x\"\n", nil, "unknown key search.embedding_model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tt.file != "" {
				path = writeFile(t, tt.file)
			}
			_, err := LoadConfig(path, tt.env)
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestStartRefusesBadConfig runs the binary: a bad key stops start-up with a
// non-zero exit and a message naming the key, and no stack trace.
func TestStartRefusesBadConfig(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "[planner]\nmax_rounds = 0\n")
	for _, cmd := range []string{"serve", "api", "worker", "gateway"} {
		_, stderr, code := ballet(t, nil, cmd, "--config", path)
		if code == 0 || !strings.Contains(stderr, "planner.max_rounds") || strings.Contains(stderr, "goroutine") {
			t.Fatalf("%s: exit %d, stderr %q", cmd, code, stderr)
		}
	}
}

func TestConfigPrintMasksSecrets(t *testing.T) {
	t.Parallel()
	out, stderr, code := ballet(t, []string{"BALLET_DATABASE_URL=postgres://app:hunter2@db:5432/ballet", "BALLET_REDIS_PASSWORD=s3cret"}, "config", "print")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(out, "hunter2") || strings.Contains(out, "s3cret") {
		t.Fatalf("secret printed:\n%s", out)
	}
	for _, want := range []string{`url = "postgres://app:********@db:5432/ballet"`, `password = "********"`, "max_rounds = 20", `model = "claude-sonnet-5-5"`} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	// config print validates exactly as start-up does.
	_, stderr, code = ballet(t, []string{"BALLET_PLANNER_MAX_ROUNDS=0"}, "config", "print")
	if code == 0 || !strings.Contains(stderr, "planner.max_rounds") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// TestMask: a secret URL keeps where it connects and loses its password,
// whether in the user information or a secret-looking query parameter (of
// any case, escaped or not); anything else secret is hidden whole.
func TestMask(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"postgres://app:hunter2@db:5432/ballet", "postgres://app:********@db:5432/ballet"},
		{"postgres://app@db:5432/ballet?password=hunter2&sslmode=require", "postgres://app@db:5432/ballet?password=********&sslmode=require"},
		{"postgres://app@db/ballet?sslmode=verify-full&sslkey=/etc/ballet/key.pem&sslpassword=k3y",
			"postgres://app@db/ballet?sslmode=verify-full&sslkey=/etc/ballet/key.pem&sslpassword=********"},
		{"postgres://app:hunter2@db/ballet?Password=hunter3", "postgres://app:********@db/ballet?Password=********"},
		{"postgres://app@db/ballet?pass%77ord=hunter2", "postgres://app@db/ballet?pass%77ord=********"},
		{"postgres://app@db/ballet?password", "postgres://app@db/ballet?password=********"},
		{"redis://:s3cret@cache:6379/0", "redis://:********@cache:6379/0"},
		{"rediss://cache:6380/0?token=s3cret&dial_timeout=3s", "rediss://cache:6380/0?token=********&dial_timeout=3s"},
		{"redis://cache:6379/0", "redis://cache:6379/0"},
		{"host=db user=app password=hunter2", "********"},
		{"0123456789abcdef0123456789abcdef", "********"},
	} {
		if got := mask(tt.in); got != tt.want {
			t.Errorf("mask(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestConfigPrintMasksQuerySecrets: config print shows no password given as
// a URL's query parameter, nor a previous signing key.
func TestConfigPrintMasksQuerySecrets(t *testing.T) {
	t.Parallel()
	out, stderr, code := ballet(t, []string{
		"BALLET_DATABASE_URL=postgres://app@db:5432/ballet?password=hunter2&sslpassword=k3ypass&sslmode=require",
		"BALLET_GATEWAY_PREVIOUS_SIGNING_KEYS=old-signing-key-0123456789abcdef,older-signing-key-0123456789abcdef",
	}, "config", "print")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, secret := range []string{"hunter2", "k3ypass", "old-signing-key", "older-signing-key"} {
		if strings.Contains(out, secret) {
			t.Errorf("%s printed:\n%s", secret, out)
		}
	}
	for _, want := range []string{`url = "postgres://app@db:5432/ballet?password=********&sslpassword=********&sslmode=require"`,
		`previous_signing_keys = ["********", "********"]`} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %s in\n%s", want, out)
		}
	}
}

// TestReadmeDocumentsEveryKey keeps the README's configuration reference in
// step with the code: every key appears there, and nothing else does.
func TestReadmeDocumentsEveryKey(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+\\.[a-z_.]+)` \\|")
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = true
	}
	cfg := DefaultConfig()
	known := map[string]bool{}
	for _, f := range fields(&cfg) {
		known[f.key] = true
		if !documented[f.key] {
			t.Errorf("README does not document %s", f.key)
		}
	}
	for k := range documented {
		if !known[k] {
			t.Errorf("README documents %s, which the code does not have", k)
		}
	}
}

// TestConfigPrintReadsBack: what config print writes is a configuration
// file that loads to the same values (secrets aside), every key in it.
func TestConfigPrintReadsBack(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig("", []string{"BALLET_REDIS_CLUSTER_ADDRS=a:1,b:2", "BALLET_SERVER_SHUTDOWN_TIMEOUT=90s",
		"BALLET_GATEWAY_SIGNING_KEY=0123456789abcdef0123456789abcdef", "BALLET_AUTH_OIDC_ISSUER_URL=https://id.example.com", "BALLET_AUTH_OIDC_AUDIENCE=ballet"})
	if err != nil {
		t.Fatal(err)
	}
	text, err := cfg.Printable()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "0123456789abcdef") || !strings.Contains(text, `signing_key = "********"`) {
		t.Fatalf("secret not masked:\n%s", text)
	}
	for _, f := range fields(&cfg) {
		name := f.key[strings.LastIndex(f.key, ".")+1:]
		// A table (gateway.prices) prints as its header.
		if !regexp.MustCompile(`(?m)^\s*(` + name + ` = |\[` + regexp.QuoteMeta(f.key) + `[.\]])`).MatchString(text) {
			t.Errorf("%s not printed", f.key)
		}
	}
	// A masked key is no key (gateway.signing_key is at least 32 bytes):
	// the real one goes back in before the printed configuration loads.
	unmasked := strings.Replace(text, `signing_key = "********"`, `signing_key = "`+cfg.Gateway.SigningKey+`"`, 1)
	back, err := LoadConfig(writeFile(t, unmasked), nil)
	if err != nil {
		t.Fatalf("printed configuration does not load: %v\n%s", err, text)
	}
	back.Gateway.SigningKey = cfg.Gateway.SigningKey
	// An empty list prints as [] (an empty table as its header), which reads
	// back as an empty list (table).
	for _, c := range []*Config{&cfg, &back} {
		for _, f := range fields(c) {
			if (f.value.Kind() == reflect.Slice || f.value.Kind() == reflect.Map) && f.value.Len() == 0 {
				f.value.Set(reflect.Zero(f.value.Type()))
			}
		}
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Fatalf("read back\n%+v\nwant\n%+v", back, cfg)
	}
}

// TestConfigPrintSaysWhenSearchHasNoVectorLeg: without
// search.embeddings_model, config print says that search is full-text and
// trigram only; with one, it says nothing of the kind.
func TestConfigPrintSaysWhenSearchHasNoVectorLeg(t *testing.T) {
	t.Parallel()
	const note = "# search.embeddings_model is empty: search is full-text and trigram only (no vector leg)"
	tests := []struct {
		name string
		env  []string
		note bool
	}{
		{"no model", nil, true},
		{"a model", []string{"BALLET_SEARCH_EMBEDDINGS_MODEL=text-embedding-3-small"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, stderr, code := ballet(t, tt.env, "config", "print")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if got := strings.Contains(out, "[search]\n"+note+"\n"); got != tt.note {
				t.Fatalf("note under [search]: %v, want %v\n%s", got, tt.note, out)
			}
			for _, want := range []string{"embed_batch = 64", "embed_concurrency = 2", `embed_delay = "2s"`, "embed_max_retry = 10"} {
				if !strings.Contains(out, want) {
					t.Errorf("missing %q in\n%s", want, out)
				}
			}
		})
	}
}
