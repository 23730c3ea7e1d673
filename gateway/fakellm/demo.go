package fakellm

import (
	_ "embed"
	"sync"
)

//go:embed demo.yaml
var demoYAML []byte

var demo = sync.OnceValue(func() *Script { return MustParse(string(demoYAML)) })

// Demo returns the built-in demo script: a planner on the demo project that
// calls list_runnable, search_project, read_skill (planner) and
// propose_changeset, then sums up its proposal.
func Demo() *Script { return demo() }

// Resolve returns the script named by a gateway.fake setting: "demo" or
// the path of a JSON or YAML script.
func Resolve(name string) (*Script, error) {
	if name == "demo" {
		return Demo(), nil
	}
	return Load(name)
}
