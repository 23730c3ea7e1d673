package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/store"
)

// capFlag is a scheduling cap given on the command line: a number, or
// "default" for the configured default (stored as null).
type capFlag struct {
	set bool
	v   *int
}

func (f *capFlag) String() string {
	if !f.set {
		return ""
	}
	return formatCap(f.v)
}

func (f *capFlag) Set(s string) error {
	if s == "default" {
		f.set, f.v = true, nil
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New(`must be a number (0: no cap) or "default"`)
	}
	f.set, f.v = true, &n
	return nil
}

func (f *capFlag) Type() string { return "N|default" }

// schedulingOptions are the flags of `ballet admin scheduling org|project`.
type schedulingOptions struct {
	config                                    string
	asJSON                                    bool
	weight                                    int
	maxRunning, maxRunningPerHuman, maxQueued capFlag
}

// newAdminSchedulingCmd is `ballet admin scheduling org|project KEY`.
func newAdminSchedulingCmd() *cobra.Command {
	sub := func(what, noun string) *cobra.Command {
		var o schedulingOptions
		c := &cobra.Command{
			Use:   what + " KEY",
			Short: "print or set the " + noun + "'s scheduling weight and caps",
			Long: "Prints the " + noun + "'s scheduling weight and caps; with flags, sets those\n" +
				"given first (the others keep their stored value) and prints the result.\n" +
				"A cap is a number (0: no cap) or \"default\" (the [scheduler] setting).\n" +
				"The dispatcher reloads them at commit.",
			Args:              oneKey(noun),
			ValidArgsFunction: cobra.NoFileCompletions,
			RunE: func(cmd *cobra.Command, args []string) error {
				return runAdminScheduling(cmd, what, args[0], &o)
			},
		}
		addConfigFlag(c, &o.config)
		fs := c.Flags()
		fs.BoolVar(&o.asJSON, "json", false, "print the settings as one JSON object")
		fs.IntVar(&o.weight, "weight", 0, "scheduling weight `N`, 1-1000: its share of worker slots against its siblings")
		fs.Var(&o.maxRunning, "max-running", "cap of turns running at once (`N` or default)")
		fs.Var(&o.maxRunningPerHuman, "max-running-per-human", "cap of one human's turns running at once (`N` or default)")
		caps := []string{"max-running", "max-running-per-human"}
		if what == "org" {
			fs.Var(&o.maxQueued, "max-queued", "cap of the organization's queued turns (`N` or default)")
			caps = append(caps, "max-queued")
		}
		for _, name := range caps {
			_ = c.RegisterFlagCompletionFunc(name, cobra.FixedCompletions([]string{"default"}, cobra.ShellCompDirectiveNoFileComp))
		}
		return c
	}
	org := sub("org", "organization")
	org.Example = "  ballet admin scheduling org acme --weight 3 --max-running 20 --max-queued default"
	project := sub("project", "project")
	project.Example = "  ballet admin scheduling project WEB --max-running-per-human 2"
	return newGroupCmd("scheduling", "print or set an organization's or a project's scheduling weight and caps", org, project)
}

// oneKey accepts exactly one argument, the KEY of the noun.
func oneKey(noun string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return usageError{fmt.Sprintf("%q needs the %s's KEY", cmd.CommandPath(), noun)}
		case len(args) > 1:
			return usageError{fmt.Sprintf("unknown argument %q for %q", args[1], cmd.CommandPath())}
		}
		return nil
	}
}

// runAdminScheduling is `ballet admin scheduling org|project KEY`: it reads
// the settings, and when flags change any, stores them as a platform admin.
func runAdminScheduling(cmd *cobra.Command, what, key string, o *schedulingOptions) error {
	ctx := cmd.Context()
	db, _, err := openStore(ctx, o.config)
	if err != nil {
		return err
	}
	defer db.Close()
	get, set := db.OrganizationScheduling, db.SetOrganizationScheduling
	if what == "project" {
		get, set = db.ProjectScheduling, db.SetProjectScheduling
	}
	caller := seedCaller()
	s, err := get(ctx, caller, key)
	if err != nil {
		return fmt.Errorf("admin scheduling %s: %w", what, err)
	}
	changed := cmd.Flags().Changed("weight")
	if changed {
		s.Weight = o.weight
	}
	for _, f := range []struct {
		flag *capFlag
		to   **int
	}{
		{&o.maxRunning, &s.MaxRunningTurns},
		{&o.maxRunningPerHuman, &s.MaxRunningTurnsPerHuman},
		{&o.maxQueued, &s.MaxQueuedTurns},
	} {
		if f.flag.set {
			*f.to, changed = f.flag.v, true
		}
	}
	if changed {
		if s, err = set(ctx, caller, key, s); err != nil {
			return fmt.Errorf("admin scheduling %s: %w", what, err)
		}
	}
	return printScheduling(cmd.OutOrStdout(), what, key, s, o.asJSON)
}

// printScheduling prints the settings as JSON (an organization's with
// every field, as the api answers) or as lines of name and value.
func printScheduling(out io.Writer, what, key string, s store.SchedulingSettings, asJSON bool) error {
	if asJSON {
		if what == "org" {
			return printResult(out, true, struct {
				store.SchedulingSettings
				MaxQueuedTurns *int `json:"max_queued_turns"`
			}{s, s.MaxQueuedTurns})
		}
		return printResult(out, true, s)
	}
	noun := map[string]string{"org": "organization", "project": "project"}[what]
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\t%s\n", noun, key)
	fmt.Fprintf(tw, "weight\t%d\n", s.Weight)
	fmt.Fprintf(tw, "max_running_turns\t%s\n", formatCap(s.MaxRunningTurns))
	fmt.Fprintf(tw, "max_running_turns_per_human\t%s\n", formatCap(s.MaxRunningTurnsPerHuman))
	if what == "org" {
		fmt.Fprintf(tw, "max_queued_turns\t%s\n", formatCap(s.MaxQueuedTurns))
	}
	return tw.Flush()
}

// formatCap shows a cap as the command line takes it.
func formatCap(v *int) string {
	switch {
	case v == nil:
		return "default"
	case *v == 0:
		return "0 (no cap)"
	}
	return strconv.Itoa(*v)
}

// newAdminBacklogCmd is `ballet admin backlog`.
func newAdminBacklogCmd() *cobra.Command {
	var config string
	var asJSON bool
	c := &cobra.Command{
		Use:   "backlog",
		Short: "print the planner's open turns per organization and project",
		Long: "Prints the planner's open turns per organization and project: ready (held\n" +
			"back by the scheduler), waiting (behind their session's open turn), in\n" +
			"flight (dispatched), running, and how long the oldest ready turn has waited.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAdminBacklog(cmd.Context(), config, asJSON, cmd.OutOrStdout())
		},
	}
	addConfigFlag(c, &config)
	c.Flags().BoolVar(&asJSON, "json", false, `print the backlog as one JSON object {"items": [...]}`)
	return c
}

// runAdminBacklog is `ballet admin backlog`.
func runAdminBacklog(ctx context.Context, config string, asJSON bool, out io.Writer) error {
	db, _, err := openStore(ctx, config)
	if err != nil {
		return err
	}
	defer db.Close()
	b, err := db.PlannerBacklog(ctx, seedCaller())
	if err != nil {
		return fmt.Errorf("admin backlog: %w", err)
	}
	if asJSON {
		return printResult(out, true, b)
	}
	if len(b.Items) == 0 {
		_, err := fmt.Fprintln(out, "no open planner turns")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ORGANIZATION\tPROJECT\tWEIGHT\tREADY\tWAITING\tIN FLIGHT\tRUNNING\tOLDEST READY")
	line := func(org, project string, weight int, c store.BacklogCounts) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1fs\n", org, project, weight,
			c.Ready, c.Waiting, c.InFlight, c.Running, c.OldestReadySeconds)
	}
	for _, o := range b.Items {
		line(o.Key, "", o.Weight, o.BacklogCounts)
		for _, p := range o.Projects {
			line("", p.Key, p.Weight, p.BacklogCounts)
		}
	}
	return tw.Flush()
}
