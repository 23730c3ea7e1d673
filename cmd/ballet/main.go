// Command ballet is Ballet Planner's one binary: the api, the worker pool,
// the LLM gateway, migrations, administration and the demo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// command is one subcommand of the binary.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, out io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the api, the worker and the gateway in one process", runServe},
		{"api", "run the api only", runAPI},
		{"worker", "run the worker only", runWorker},
		{"gateway", "run the LLM gateway only", runGateway},
		{"migrate", "apply, show or check database migrations (up | status | check)", runMigrate},
		{"admin", "create organizations, projects, role bindings and API tokens", runAdmin},
		{"demo", "create the demo organization, project and token (idempotent)", runDemo},
		{"chat", "talk to the planner of a running api in the terminal", runChat},
		{"fake-llm", "serve the scripted fake model upstream (demo or a script file)", runFakeLLM},
		{"search", "embeddings of the vector search leg: backfill, status", runSearch},
		{"bench", "run a benchmark against this configuration (gateway, …)", runBench},
		{"config", "print the effective configuration (print)", runConfig},
		{"healthcheck", "exit 0 when a running process's /readyz answers 200 (the image's HEALTHCHECK)", runHealthcheck},
		{"version", "print the version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "ballet:", err)
		}
		os.Exit(exitCode(err))
	}
}

func exitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func dispatch(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(errOut)
		if len(args) == 0 {
			return usageError{"a command is required"}
		}
		return flag.ErrHelp
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], out)
		}
	}
	usage(errOut)
	return usageError{fmt.Sprintf("unknown command %q", args[0])}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: ballet <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'ballet <command> --help' for a command's flags.")
}

// newFlags makes a flag set that prints its usage to stderr and returns
// errors instead of exiting.
func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("ballet "+name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: ballet %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags, turning parse failures into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}

func runVersion(_ context.Context, args []string, out io.Writer) error {
	fs := newFlags("version", "version")
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(out, "ballet", version)
	return nil
}

func runConfig(_ context.Context, args []string, out io.Writer) error {
	fs := newFlags("config", "config print [--config FILE]")
	path := fs.String("config", "", "TOML configuration file (default $BALLET_CONFIG)")
	if len(args) == 0 || args[0] != "print" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fs.Usage()
			return flag.ErrHelp
		}
		fs.Usage()
		return usageError{"config: expected the subcommand print"}
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cfg, err := LoadConfig(configPath(*path), os.Environ())
	if err != nil {
		return err
	}
	text, err := cfg.Printable()
	if err != nil {
		return err
	}
	fmt.Fprint(out, text)
	return nil
}
