package main

import (
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
)

// dockerignore is .dockerignore as Docker reads it: patterns relative to
// the context, * and ? within a path element, ** across elements, !
// re-including, the last matching line deciding, and a directory's
// exclusion covering everything under it.
type dockerignore []struct {
	re     *regexp.Regexp
	negate bool
}

func parseDockerignore(text string) dockerignore {
	var d dockerignore
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		negate := strings.HasPrefix(line, "!")
		line = strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(line, "!")), "/")
		var re strings.Builder
		for i := 0; i < len(line); i++ {
			switch {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case line[i] == '*':
				re.WriteString("[^/]*")
			case line[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(line[i : i+1]))
			}
		}
		d = append(d, struct {
			re     *regexp.Regexp
			negate bool
		}{regexp.MustCompile("^" + re.String() + "$"), negate})
	}
	return d
}

// excludes reports whether file (slash-separated, relative to the context)
// stays out of the build context.
func (d dockerignore) excludes(file string) bool {
	out := false
	for _, p := range d {
		for dir := file; dir != "." && dir != "/"; dir = path.Dir(dir) {
			if p.re.MatchString(dir) {
				out = !p.negate
				break
			}
		}
	}
	return out
}

// TestDockerignore: the build context has no history, no local state (the
// dev database under .dev), no binaries or test output, and keeps every
// file the image's `go build ./cmd/ballet` reads, embedded ones included.
func TestDockerignore(t *testing.T) {
	t.Parallel()
	d := parseDockerignore(string(readRepoFile(t, ".dockerignore")))
	for _, f := range []string{
		".git", ".git/HEAD", ".git/objects/ab/cdef", ".dev", ".dev/pg/PG_VERSION", ".dev/demo-token", ".dev/redis/dump.rdb",
		"bin", "bin/ballet", "ballet", "store.test", "cmd/ballet/ballet.test", "coverage.out", "cover.out",
		"api/web/node_modules/vite/package.json", "node_modules/x/y.js", ".env",
	} {
		if !d.excludes(f) {
			t.Errorf("%s goes into the build context", f)
		}
	}
	for _, f := range []string{
		"go.mod", "go.sum", "cmd/ballet/main.go", "api/web/dist/index.html", "api/openapi.json",
		"store/migrations/00001_schema.sql", "gateway/fakellm/demo.yaml", "store/storetest/wait.go",
	} {
		if d.excludes(f) {
			t.Errorf("%s is left out of the build context, and the build needs it", f)
		}
		if _, err := os.Stat("../../" + f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
