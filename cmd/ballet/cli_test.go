package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// cli runs one command line in-process and returns its stdout, stderr and
// exit status.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(t.Context(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// commandsOf is every command of the tree that a user sees (root first).
// Each is taken from a tree of its own: cobra fills a command's flag sets
// lazily, from its parents', so parallel subtests must not share a tree.
func commandsOf(t *testing.T) []*cobra.Command {
	t.Helper()
	var paths [][]string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		paths = append(paths, argsOf(c))
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(io.Discard, io.Discard))
	if len(paths) < 30 {
		t.Fatalf("only %d commands in the tree", len(paths))
	}
	all := make([]*cobra.Command, 0, len(paths))
	for _, path := range paths {
		c, _, err := newRootCmd(io.Discard, io.Discard).Find(path)
		if err != nil || !slices.Equal(argsOf(c), path) {
			t.Fatalf("find %v in a new tree: %v, %v", path, c, err)
		}
		all = append(all, c)
	}
	return all
}

// argsOf are the arguments that name c: its path without "ballet".
func argsOf(c *cobra.Command) []string {
	return strings.Fields(c.CommandPath())[1:]
}

func TestCLIVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"-v"}, {"version"}} {
		out, stderr, code := cli(t, args...)
		if code != 0 || out != "ballet "+version+"\n" || stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and %q", args, code, out, stderr, "ballet "+version+"\n")
		}
	}
}

// TestCLIHelpOfEveryCommand: --help and `help <command>` print to stdout
// and exit 0, with the summary of every subcommand and every flag with a
// description.
func TestCLIHelpOfEveryCommand(t *testing.T) {
	t.Parallel()
	for _, c := range commandsOf(t) {
		t.Run(c.CommandPath(), func(t *testing.T) {
			t.Parallel()
			if c.Short == "" {
				t.Errorf("%s has no summary", c.CommandPath())
			}
			helps := [][]string{append(argsOf(c), "--help"), append(argsOf(c), "-h")}
			if c.HasParent() {
				helps = append(helps, append([]string{"help"}, argsOf(c)...))
			}
			for _, args := range helps {
				out, stderr, code := cli(t, args...)
				if code != 0 || stderr != "" {
					t.Fatalf("%v: exit %d, stderr %q; want 0 and nothing", args, code, stderr)
				}
				if !strings.Contains(out, "Usage:\n  "+c.CommandPath()) {
					t.Errorf("%v: no usage line in\n%s", args, out)
				}
				for _, sub := range c.Commands() {
					if sub.IsAvailableCommand() && (!strings.Contains(out, sub.Name()+" ") || !strings.Contains(out, sub.Short)) {
						t.Errorf("%v: subcommand %s (%q) not listed in\n%s", args, sub.Name(), sub.Short, out)
					}
				}
				c.LocalFlags().VisitAll(func(f *pflag.Flag) {
					if strings.TrimSpace(f.Usage) == "" {
						t.Errorf("%s --%s has no description", c.CommandPath(), f.Name)
					}
					if !f.Hidden && !strings.Contains(out, "--"+f.Name) {
						t.Errorf("%v: --%s not listed in\n%s", args, f.Name, out)
					}
				})
			}
		})
	}
}

// TestCLIRootHelp lists every command with its summary.
func TestCLIRootHelp(t *testing.T) {
	t.Parallel()
	out, _, code := cli(t, "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, name := range []string{"serve", "api", "worker", "gateway", "migrate", "admin", "demo", "chat",
		"fake-llm", "search", "bench", "config", "healthcheck", "version", "completion", "help"} {
		c, _, err := newRootCmd(io.Discard, io.Discard).Find([]string{name})
		if err != nil || c.Name() != name {
			t.Fatalf("no command %s", name)
		}
		if !strings.Contains(out, "\n  "+name+" ") || !strings.Contains(out, c.Short) {
			t.Errorf("root help lacks %s (%q):\n%s", name, c.Short, out)
		}
	}
}

// TestCLIUsageErrors: a wrong command line prints one error and a hint to
// stderr, nothing to stdout, and exits 2.
func TestCLIUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"ballet: a command is required", "Run 'ballet --help' for usage.", "Commands:\n  serve "}},
		{[]string{"frobnicate"}, []string{`ballet: unknown command "frobnicate" for "ballet"`, "Run 'ballet --help' for usage."}},
		{[]string{"serv"}, []string{`unknown command "serv" for "ballet"; did you mean "serve"?`}},
		{[]string{"--nope"}, []string{"ballet: unknown flag: --nope", "Run 'ballet --help' for usage."}},
		{[]string{"serve", "--nope"}, []string{"ballet: unknown flag: --nope", "Run 'ballet serve --help' for usage."}},
		{[]string{"serve", "extra"}, []string{`ballet: unknown argument "extra" for "ballet serve"`, "Run 'ballet serve --help' for usage."}},
		{[]string{"serve", "--config"}, []string{"flag needs an argument: --config"}},
		{[]string{"bench", "gateway", "--requests", "x"}, []string{`invalid argument "x" for "--requests"`, "Run 'ballet bench gateway --help'"}},
		{[]string{"healthcheck", "--timeout", "5"}, []string{`invalid argument "5" for "--timeout"`}},
		{[]string{"bench", "nope"}, []string{`unknown command "nope" for "ballet bench"`, "Run 'ballet bench --help' for usage."}},
		{[]string{"admin", "org", "delete"}, []string{`unknown command "delete" for "ballet admin org"`}},
		{[]string{"help", "nope"}, []string{`unknown help topic "nope"`}},
		{[]string{"completion", "tcsh"}, []string{`unknown command "tcsh" for "ballet completion"`}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			out, stderr, code := cli(t, tc.args...)
			if code != 2 || out != "" {
				t.Fatalf("exit %d, stdout %q; want 2 and nothing", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// TestCLIGroupsNeedASubcommand: a command that only holds subcommands,
// run bare, prints its usage with every subcommand to stderr and exits 2;
// with an unknown subcommand it names it.
func TestCLIGroupsNeedASubcommand(t *testing.T) {
	t.Parallel()
	for _, c := range commandsOf(t) {
		if !c.HasAvailableSubCommands() || !c.HasParent() {
			continue
		}
		t.Run(c.CommandPath(), func(t *testing.T) {
			t.Parallel()
			out, stderr, code := cli(t, argsOf(c)...)
			if code != 2 || out != "" || !strings.Contains(stderr, "ballet: a subcommand is required") {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
			}
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() && !strings.Contains(stderr, sub.Short) {
					t.Errorf("usage lacks %s (%q):\n%s", sub.Name(), sub.Short, stderr)
				}
			}
			_, stderr, code = cli(t, append(argsOf(c), "nope")...)
			if want := `unknown command "nope" for "` + c.CommandPath() + `"`; code != 2 || !strings.Contains(stderr, want) {
				t.Errorf("nope: exit %d, stderr %q; want 2 and %q", code, stderr, want)
			}
		})
	}
}

// TestCLIRefusesExtraArguments: every command refuses an argument it does
// not take before doing anything: with a configuration file that does not
// exist, running would fail with exit 1.
func TestCLIRefusesExtraArguments(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.toml")
	for _, c := range commandsOf(t) {
		if c.HasAvailableSubCommands() || c.Name() == "help" {
			continue
		}
		t.Run(c.CommandPath(), func(t *testing.T) {
			t.Parallel()
			// The arguments a command takes are named in its Use (org KEY).
			args := append(argsOf(c), strings.Fields(c.Use)[1:]...)
			if c.Flags().Lookup("config") != nil {
				args = append(args, "--config", missing)
			}
			out, stderr, code := cli(t, append(args, "extra")...)
			if code != 2 || out != "" || !strings.Contains(stderr, `"extra"`) || !strings.Contains(stderr, c.CommandPath()) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 naming the argument", code, out, stderr)
			}
			if strings.Contains(stderr, "missing.toml") {
				t.Errorf("the command ran: %s", stderr)
			}
		})
	}
}

// TestCLICompletion: the completion scripts are valid for their shell, and
// they complete commands (with descriptions), subcommands and .toml files
// for --config.
func TestCLICompletion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ shell, check string }{
		{"bash", "-n"}, {"zsh", "-n"}, {"fish", "--no-execute"}, {"powershell", ""},
	} {
		t.Run(tc.shell, func(t *testing.T) {
			t.Parallel()
			out, stderr, code := cli(t, "completion", tc.shell)
			if code != 0 || stderr != "" || !strings.Contains(out, "ballet") || !strings.Contains(out, "__complete") {
				t.Fatalf("exit %d, stderr %q, script %.200q", code, stderr, out)
			}
			if tc.check == "" {
				return
			}
			if _, err := exec.LookPath(tc.shell); err != nil {
				t.Fatalf("%s is not installed, so its completion script cannot be checked: run deploy/dev/services.sh shells (make test does)", tc.shell)
			}
			p := filepath.Join(t.TempDir(), "ballet."+tc.shell)
			if err := os.WriteFile(p, []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
			if msg, err := exec.Command(tc.shell, tc.check, p).CombinedOutput(); err != nil {
				t.Fatalf("%s %s: %v\n%s", tc.shell, tc.check, err, msg)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{""}, []string{"serve\trun the api, the worker and the gateway in one process", "bench\t", "completion\t"}},
		{[]string{"bench", ""}, []string{"gateway\t", "turns\t", "realtime\t", "embed\t", "search\t"}},
		{[]string{"admin", "token", ""}, []string{"create\t"}},
		{[]string{"serve", "--"}, []string{"--config\t"}},
		{[]string{"serve", "--config", ""}, []string{"toml", ":8"}}, // :8 is ShellCompDirectiveFilterFileExt
	} {
		out, _, code := cli(t, append([]string{"__complete"}, tc.args...)...)
		for _, w := range tc.want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("__complete %q: exit %d, lacks %q:\n%s", tc.args, code, w, out)
			}
		}
	}
}
