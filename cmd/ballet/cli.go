package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

func init() {
	// Commands are listed in the order they are added: servers first.
	cobra.EnableCommandSorting = false
}

// newRootCmd builds the command tree of the binary, which prints help and
// output to out and errors to errOut. Every command has a summary, every
// flag a description; a command that takes no arguments refuses them.
func newRootCmd(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "ballet",
		Short: "Ballet Planner: the api, the worker pool, the LLM gateway, migrations, administration and the demo",
		Long: "Ballet Planner's one binary: the api, the worker pool, the LLM gateway,\n" +
			"migrations, administration and the demo.\n\n" +
			"Every command reads its settings from a TOML file (--config FILE, else\n" +
			"$BALLET_CONFIG) and BALLET_* environment variables; `ballet config print`\n" +
			"shows the result.",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		RunE:          requireSubcommand,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetVersionTemplate("ballet {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	root.SetUsageTemplate(usageTemplate)
	root.AddCommand(
		newServeCmd(), newAPICmd(), newWorkerCmd(), newGatewayCmd(),
		newMigrateCmd(), newAdminCmd(), newRetentionCmd(), newDemoCmd(), newChatCmd(), newFakeLLMCmd(),
		newSearchCmd(), newBenchCmd(), newConfigCmd(), newHealthcheckCmd(), newVersionCmd(),
	)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Short, c.RunE = "print the help of a command", runHelp
		case "completion":
			c.Short = "print the shell completion script for bash, zsh, fish or powershell"
			c.Args, c.RunE = cobra.ArbitraryArgs, requireSubcommand
		}
	}
	refuseArgs(root)
	return root
}

// refuseArgs makes every command below c that declares no argument
// validator of its own refuse arguments.
func refuseArgs(c *cobra.Command) {
	for _, sub := range c.Commands() {
		if sub.Args == nil && sub.Name() != "help" {
			sub.Args = noArgs
		}
		refuseArgs(sub)
	}
}

// noArgs refuses any argument, naming the first.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("unknown argument %q for %q", args[0], cmd.CommandPath())}
	}
	return nil
}

// newGroupCmd is a command that only holds subcommands.
func newGroupCmd(name, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   name + " <command>",
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE:  requireSubcommand,
	}
	c.AddCommand(subs...)
	return c
}

// requireSubcommand is the action of a command that only holds
// subcommands: without one it prints the usage to stderr; either way the
// command line is a usage error.
func requireSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
		if !cmd.HasParent() {
			return usageError{"a command is required"}
		}
		return usageError{"a subcommand is required"}
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usageError{msg}
}

// runHelp is `ballet help [command]`: the help of a command on stdout, a
// usage error for a command that does not exist.
func runHelp(cmd *cobra.Command, args []string) error {
	target, rest, err := cmd.Root().Find(args)
	if err != nil || target == nil || len(rest) > 0 {
		return usageError{fmt.Sprintf("unknown help topic %q", strings.Join(args, " "))}
	}
	target.InitDefaultHelpFlag()
	target.InitDefaultVersionFlag()
	return target.Help()
}

// addConfigFlag adds --config FILE, which completes to .toml files.
func addConfigFlag(c *cobra.Command, p *string) {
	c.Flags().StringVar(p, "config", "", "read the settings from this TOML `FILE` (default $BALLET_CONFIG); BALLET_* variables override it")
	_ = c.MarkFlagFilename("config", "toml")
}

// usageTemplate is cobra's usage, without the [flags] line of a command
// that only holds subcommands.
const usageTemplate = `Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} <command>{{if .HasAvailableFlags}} [flags]{{end}}{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Run '{{.CommandPath}} <command> --help' for a command's flags.{{end}}
`
