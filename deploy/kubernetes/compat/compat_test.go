package compat

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kubectlKustomize maps the kustomize/api versions built into the kubectl
// versions Ballet supports (k8s.io/cli-runtime's go.mod of each release) to
// that kubectl and its kustomize.
var kubectlKustomize = map[string]string{
	"v0.13.5-0.20230601165947-6ce0bf390ce3": "kubectl 1.30 (kustomize v5.0.4-0.20230601165947-6ce0bf390ce3)",
	"v0.17.2":                               "kubectl 1.31 (kustomize v5.4.2)",
}

// kustomizeVersion is the kustomize/api this test binary was built with,
// read from the source path of one of its functions
// (…/sigs.k8s.io/kustomize/api@v0.17.2/krusty/kustomizer.go): a test
// binary's build information lists no dependencies.
func kustomizeVersion(t *testing.T) string {
	t.Helper()
	file, _ := runtime.FuncForPC(reflect.ValueOf(krusty.MakeKustomizer).Pointer()).FileLine(0)
	_, rest, ok := strings.Cut(filepath.ToSlash(file), "sigs.k8s.io/kustomize/api@")
	version, _, _ := strings.Cut(rest, "/")
	if !ok || version == "" {
		t.Fatalf("no kustomize/api version in the path %s", file)
	}
	return version
}

// kustomizeMu serialises builds: kyaml's OpenAPI schema lives in package
// globals that concurrent builds race on.
var kustomizeMu sync.Mutex

// render runs kustomize on dir; a panic of kustomize's is an error.
func render(dir string) (out []byte, err error) {
	kustomizeMu.Lock()
	defer kustomizeMu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("kustomize build %s panicked: %v", dir, p)
		}
	}()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return rm.AsYaml()
}

// TestOlderKustomizeRendersTheSame: the base and the production overlay
// render with this kubectl's kustomize, to the bytes the newest one renders.
func TestOlderKustomizeRendersTheSame(t *testing.T) {
	t.Parallel()
	version := kustomizeVersion(t)
	kubectl, ok := kubectlKustomize[version]
	if !ok {
		t.Fatalf("kustomize/api %s is not the kustomize of a supported kubectl (%v)", version, kubectlKustomize)
	}
	t.Logf("kustomize/api %s: %s", version, kubectl)
	for name, dir := range map[string]string{"base": "base", "production": filepath.Join("overlays", "production")} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := render(filepath.Join("..", dir))
			if err != nil {
				t.Fatalf("%s: %v", kubectl, err)
			}
			want, err := os.ReadFile(filepath.Join("..", "testdata", "rendered", name+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s renders %s differently from the newest kustomize (../testdata/rendered/%s.yaml): %s",
					kubectl, dir, name, firstDifference(string(want), string(got)))
			}
		})
	}
}

// TestOlderKustomizeRefusesSeveralDeletionsInOneFile: the patch layout the
// production overlay once had, two `$patch: delete` documents in one file,
// fails (kubectl 1.30) or panics (1.31) here; the render test would catch
// a return to it.
func TestOlderKustomizeRefusesSeveralDeletionsInOneFile(t *testing.T) {
	t.Parallel()
	kubectl := kubectlKustomize[kustomizeVersion(t)]
	_, err := render(filepath.Join("testdata", "multi-delete"))
	if err == nil {
		t.Fatalf("%s rendered two $patch: delete documents of one file; the overlay's one-patch-per-file layout may be relaxed", kubectl)
	}
	if !strings.Contains(err.Error(), "panicked") && !strings.Contains(err.Error(), "unable to parse SM or JSON patch") {
		t.Errorf("%s: %v; want the panic or the parse error of one file of several patches", kubectl, err)
	}
	t.Logf("%s: %v", kubectl, firstLine(err.Error()))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// firstDifference names the first line where two renders differ.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d: the file has %q, this kustomize renders %q", i+1, wl, gl)
		}
	}
	return "no line differs"
}
