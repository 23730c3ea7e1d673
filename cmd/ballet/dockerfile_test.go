package main

import (
	"regexp"
	"strings"
	"testing"
)

// unpinnedImages are the base images deploy/Dockerfile may name without a
// digest, each with why (deploy/kubernetes/README.md, "The image").
var unpinnedImages = map[string]string{
	"scratch": "the empty image: nothing is pulled",
}

// TestDockerfileBaseImages: every FROM of deploy/Dockerfile names an
// earlier stage or an image pinned by its sha256 digest, but for the images
// unpinnedImages lists.
func TestDockerfileBaseImages(t *testing.T) {
	t.Parallel()
	from := regexp.MustCompile(`(?im)^FROM\s+(\S+)(?:\s+AS\s+(\S+))?\s*$`)
	pinned := regexp.MustCompile(`^[a-z0-9./_-]+(:[\w.-]+)?@sha256:[0-9a-f]{64}$`)
	stages := map[string]bool{}
	matches := from.FindAllStringSubmatch(string(readRepoFile(t, "deploy/Dockerfile")), -1)
	if len(matches) < 2 {
		t.Fatalf("deploy/Dockerfile: %d FROM lines, want a build and a runtime stage", len(matches))
	}
	for _, m := range matches {
		image := m[1]
		if !stages[strings.ToLower(image)] && !pinned.MatchString(image) && unpinnedImages[image] == "" {
			t.Errorf("FROM %s: not pinned by digest (image@sha256:…)", image)
		}
		if m[2] != "" {
			stages[strings.ToLower(m[2])] = true
		}
	}
}
