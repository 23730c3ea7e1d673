package main

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// otherEnv are the BALLET_ variables that name no configuration key but
// that the docs tell a user to set, each with what reads it. Every command
// ignores them, so that one set for `ballet chat` or for docker compose
// breaks no other; a BALLET_ variable that is neither one of these nor a
// key's is refused, naming it.
var otherEnv = map[string]string{
	"BALLET_CONFIG":       "every command: the configuration file, when --config is not given",
	"BALLET_TOKEN":        "ballet chat: the API token, when --token is not given",
	"BALLET_PUBLISH_ADDR": "docker-compose.yml: the host address the api's and the gateway's ports are published on",
	"BALLET_VERSION":      "docker-compose.yml: the version built into the image",
	"BALLET_BIN":          "deploy/dev/cluster.sh: the binary it runs, when --bin is not given",
	"BALLET_SCREENSHOTS":  "cmd/ballet's browser test: 1 saves the README's screenshots",
}

// testEnvPrefix begins the test suites' variables (BALLET_TEST_DATABASE_URL,
// BALLET_TEST_REDIS_URL, …), which every command ignores too.
const testEnvPrefix = "BALLET_TEST_"

// unknownEnv is the error for a BALLET_ variable that names no key; the
// variable of a moved key names the new key and its variable.
func unknownEnv(name string) error {
	for from, to := range movedKeys {
		if name == envName(from) {
			return fmt.Errorf("environment variable %s: %s moved to %s; set %s", name, from, to, envName(to))
		}
	}
	return fmt.Errorf("unknown environment variable %s: it names no key (BALLET_<SECTION>_<KEY>) and is none of %s",
		name, strings.Join(slices.Sorted(maps.Keys(otherEnv)), ", "))
}

// applyEnv sets keys from BALLET_<SECTION>_<KEY> variables. A BALLET_
// variable that is neither a key's nor one of otherEnv is an error, like an
// unknown key in the file.
func applyEnv(cfg *Config, environ []string) error {
	byEnv := map[string]field{}
	for _, f := range fields(cfg) {
		byEnv[f.env] = f
	}
	var names []string
	vals := map[string]string{}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "BALLET_") || otherEnv[name] != "" || strings.HasPrefix(name, testEnvPrefix) {
			continue
		}
		names = append(names, name)
		vals[name] = val
	}
	sort.Strings(names)
	for _, name := range names {
		f, ok := byEnv[name]
		if !ok {
			return fmt.Errorf("config: %w", unknownEnv(name))
		}
		if err := setFromString(f.value, vals[name]); err != nil {
			return fmt.Errorf("config: %s (%s): %w", f.key, name, err)
		}
	}
	return nil
}

var durationType = reflect.TypeOf(time.Duration(0))

func setFromString(v reflect.Value, s string) error {
	if v.Type() == durationType {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("must be a duration such as \"10s\", got %q", s)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("must be true or false, got %q", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("must be an integer, got %q", s)
		}
		v.SetInt(n)
	case reflect.Float64:
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("must be a number, got %q", s)
		}
		v.SetFloat(n)
	case reflect.Slice:
		var parts []string
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	case reflect.Map:
		return errors.New("a table: set it in the configuration file")
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}
