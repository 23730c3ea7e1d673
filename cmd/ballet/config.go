package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/embeddings"
	"github.com/balletplanner/ballet/gateway"
	"github.com/balletplanner/ballet/internal/webhooks"
	"github.com/balletplanner/ballet/retention"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/worker"
	"github.com/balletplanner/ballet/worker/dispatch"
)

// Config is the whole configuration: defaults, then the TOML file, then
// BALLET_<SECTION>_<KEY> environment variables.
type Config struct {
	Server   api.Config              `toml:"server"`
	Database store.Config            `toml:"database"`
	Redis    tasks.RedisConfig       `toml:"redis"`
	Worker   worker.Config           `toml:"worker"`
	Planner  worker.PlannerConfig    `toml:"planner"`
	Gateway  gateway.Config          `toml:"gateway"`
	Auth     api.AuthConfig          `toml:"auth"`
	Log      LogConfig               `toml:"log"`
	Metrics  MetricsConfig           `toml:"metrics"`
	Search   embeddings.SearchConfig `toml:"search"`
	// Retention is the [retention] section (retention/config.go).
	Retention retention.Config `toml:"retention"`
	// Scheduler is the [scheduler] section (worker/dispatch/config.go).
	Scheduler dispatch.Config `toml:"scheduler"`
	// Webhooks is the [webhooks] section (internal/webhooks/config.go).
	Webhooks webhooks.Config `toml:"webhooks"`
}

// LogConfig is the [log] section.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `toml:"level"`
	// Format is json or text.
	Format string `toml:"format"`
}

// MetricsConfig is the [metrics] section: the internal listener of every
// process that serves /metrics (and /healthz, /readyz) to Prometheus, away
// from the public ports.
type MetricsConfig struct {
	// Addr is where the metrics listener listens; keep it off the public
	// network.
	Addr string `toml:"addr"`
	// Token, when set, is the bearer token a scrape must send in its
	// Authorization header to read /metrics.
	Token string `toml:"token" secret:"true"`
}

// minMetricsToken is the shortest metrics.token accepted.
const minMetricsToken = 16

// Validate reports the first invalid key of the section.
func (c MetricsConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("metrics.addr: must be host:port (e.g. 127.0.0.1:8083), got %q", c.Addr)
	}
	if c.Token != "" && (len(c.Token) < minMetricsToken || strings.ContainsFunc(c.Token, unicode.IsSpace)) {
		return fmt.Errorf("metrics.token: must be at least %d characters without spaces", minMetricsToken)
	}
	return nil
}

// DefaultConfig returns every built-in default.
func DefaultConfig() Config {
	return Config{
		Server:   api.DefaultConfig(),
		Database: store.DefaultConfig(),
		Redis:    tasks.DefaultRedisConfig(),
		Worker:   worker.DefaultConfig(),
		Planner:  worker.DefaultPlannerConfig(),
		Gateway:  gateway.DefaultConfig(),
		Auth:     api.DefaultAuthConfig(),
		Log:      LogConfig{Level: "info", Format: "json"},
		Metrics:  MetricsConfig{Addr: "127.0.0.1:8083"},
		Search:   embeddings.DefaultSearchConfig(),
		// Retention: retention/config.go.
		Retention: retention.DefaultConfig(),
		Scheduler: dispatch.DefaultConfig(),
		Webhooks:  webhooks.DefaultConfig(),
	}
}

// Validate checks every section; the first error names its key.
func (c Config) Validate() error {
	for _, err := range []error{
		c.Server.Validate(), c.Database.Validate(), c.Redis.Validate(), c.Worker.Validate(),
		c.Planner.Validate(), c.Gateway.Validate(), c.Auth.Validate(c.Server.Addr), c.Log.Validate(),
		c.Metrics.Validate(), c.Search.Validate(), c.Retention.Validate(), c.Scheduler.Validate(),
		c.Webhooks.Validate(),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Validate reports the first invalid key of the section.
func (c LogConfig) Validate() error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.Level)); err != nil {
		return fmt.Errorf("log.level: must be debug, info, warn or error, got %q", c.Level)
	}
	if c.Format != "json" && c.Format != "text" {
		return fmt.Errorf("log.format: must be json or text, got %q", c.Format)
	}
	return nil
}

// LoadConfig builds the configuration from the file at path (may be empty)
// and the environment, and validates it as start-up does.
func LoadConfig(path string, environ []string) (Config, error) {
	cfg := DefaultConfig()
	if path != "" {
		md, err := toml.DecodeFile(path, &cfg)
		if err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, describeTOMLError(err))
		}
		if und := md.Undecoded(); len(und) > 0 {
			keys := make([]string, len(und))
			for i, k := range und {
				keys[i] = k.String()
			}
			return Config{}, fmt.Errorf("config %s: %w", path, unknownKeys(keys))
		}
	}
	if err := applyEnv(&cfg, environ); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	// Every store a process opens dispatches as the scheduler says.
	cfg.Database.DirectDispatch = !cfg.Scheduler.Fair()
	return cfg, nil
}

func describeTOMLError(err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return errors.New(strings.ReplaceAll(pe.Error(), "toml: ", ""))
	}
	return err
}

// movedKeys maps each key that moved to the section of the service that
// uses it onto its new name. The old name is refused like any unknown key,
// with a message naming the new one.
var movedKeys = map[string]string{
	"worker.max_queued_turns":             "server.max_queued_turns",
	"worker.max_queued_turns_per_project": "server.max_queued_turns_per_project",
}

// unknownKeys is the error for keys of the file that the configuration
// does not have: a moved key names its new key, the rest are listed.
func unknownKeys(keys []string) error {
	var msgs, unknown []string
	for _, k := range keys {
		if to, ok := movedKeys[k]; ok {
			msgs = append(msgs, k+" moved to "+to)
		} else {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		msgs = append(msgs, "unknown key "+strings.Join(unknown, ", "))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// envName is the environment variable of a key: planner.max_rounds is
// BALLET_PLANNER_MAX_ROUNDS.
func envName(key string) string {
	return "BALLET_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// field is one leaf key of the configuration.
type field struct {
	key    string // planner.max_rounds
	env    string // BALLET_PLANNER_MAX_ROUNDS
	value  reflect.Value
	secret bool
}

// fields lists every leaf key of cfg in declaration order.
func fields(cfg *Config) []field {
	var out []field
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			name := sf.Tag.Get("toml")
			if name == "" || name == "-" {
				continue
			}
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct {
				walk(fv, key)
				continue
			}
			out = append(out, field{key: key, env: envName(key), value: fv, secret: sf.Tag.Get("secret") == "true"})
		}
	}
	walk(reflect.ValueOf(cfg).Elem(), "")
	return out
}

// Printable renders the effective configuration as TOML, every key with
// its value (an empty list as []), secrets masked.
func (c Config) Printable() (string, error) {
	for _, f := range fields(&c) {
		switch v := f.value; {
		case f.secret && v.Kind() == reflect.String && !v.IsZero():
			v.SetString(mask(v.String()))
		case f.secret && v.Kind() == reflect.Slice && v.Len() > 0:
			masked := make([]string, v.Len())
			for i := range masked {
				masked[i] = mask(v.Index(i).String())
			}
			v.Set(reflect.ValueOf(masked))
		case v.Kind() == reflect.Slice && v.IsNil():
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		case v.Kind() == reflect.Map && v.IsNil(): // printed as an empty table
			v.Set(reflect.MakeMap(v.Type()))
		}
	}
	var b strings.Builder
	enc := toml.NewEncoder(&b)
	enc.Indent = ""
	if err := enc.Encode(c); err != nil {
		return "", fmt.Errorf("config: print: %w", err)
	}
	text := b.String()
	if c.Search.EmbeddingsModel == "" {
		text = strings.Replace(text, "\n[search]\n", "\n[search]\n"+noVectorLeg+"\n", 1)
	}
	return text, nil
}

// noVectorLeg is what config print says under [search] when no embeddings
// model is set.
const noVectorLeg = "# search.embeddings_model is empty: search is full-text and trigram only (no vector leg)"

// configPath is --config, else BALLET_CONFIG.
func configPath(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv("BALLET_CONFIG")
}

// mask hides a secret; for a URL it hides only the password, given in
// its user information or as a query parameter (?password=…), so that the
// printed configuration still says where it connects.
func mask(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "********"
	}
	u.RawQuery = maskQuery(u.RawQuery)
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
		return strings.Replace(u.String(), "xxxxx", "********", 1)
	}
	return u.String()
}

// secretParams are what the names of query parameters that hold secrets
// contain: libpq's password and sslpassword, tokens, keys of APIs.
var secretParams = []string{"password", "passwd", "secret", "token", "apikey", "api_key", "credential"}

// maskQuery replaces the value of every secret-looking parameter of a raw
// query with ********, leaving the rest as written.
func maskQuery(raw string) string {
	if raw == "" {
		return raw
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		name = strings.ToLower(name)
		if slices.ContainsFunc(secretParams, func(s string) bool { return strings.Contains(name, s) }) {
			parts[i] = k + "=********"
		}
	}
	return strings.Join(parts, "&")
}
