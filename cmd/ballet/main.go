// Command ballet is Ballet Planner's one binary: the api, the worker pool,
// the LLM gateway, migrations, administration and the demo.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses of the binary.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // the command line is wrong; nothing ran
)

// execute runs one command line through the command tree, writing help
// and command output to out and errors to errOut, and returns the exit
// status: a usage mistake prints the error and a hint to run --help.
func execute(ctx context.Context, args []string, out, errOut io.Writer) int {
	root := newRootCmd(out, errOut)
	root.SetArgs(args)
	ran := false
	// Runs once cobra has parsed the flags and validated the arguments:
	// an error before it is cobra's (a usage mistake), one after it the
	// command's.
	root.PersistentPreRun = func(*cobra.Command, []string) { ran = true }
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if cmd == nil {
		cmd = root
	}
	var ue usageError
	if errors.As(err, &ue) || !ran {
		fmt.Fprintf(errOut, "ballet: %s\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return exitUsage
	}
	fmt.Fprintln(errOut, "ballet:", err)
	return exitFailure
}

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version",
		Long:  "Prints the version of this binary, as `ballet --version` does.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "ballet", version)
			return nil
		},
	}
}

func newConfigCmd() *cobra.Command {
	var path string
	printCmd := &cobra.Command{
		Use:   "print",
		Short: "print the effective configuration (file, then BALLET_* variables, then defaults), secrets masked",
		Long: "Prints the configuration a process would run with: the defaults, overridden by the\n" +
			"TOML file (--config, else $BALLET_CONFIG), overridden by BALLET_* environment variables.\n" +
			"Secrets are masked. Unknown keys and variables are errors.",
		Example: "  ballet config print --config ballet.toml\n  BALLET_WORKER_CONCURRENCY=8 ballet config print",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConfigPrint(path, cmd.OutOrStdout())
		},
	}
	addConfigFlag(printCmd, &path)
	return newGroupCmd("config", "print the effective configuration (print)", printCmd)
}

// runConfigPrint is `ballet config print`.
func runConfigPrint(path string, out io.Writer) error {
	cfg, err := LoadConfig(configPath(path), os.Environ())
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
