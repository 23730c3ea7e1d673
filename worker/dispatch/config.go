// Package dispatch schedules planner turns fairly: one dispatcher, elected
// among the worker processes, hands free worker slots to ready turns across
// organizations, then their projects, then the humans who sent them, by
// weight and under caps, interactive turns first inside an organization's
// share, and only then enqueues their tasks.
package dispatch

import "fmt"

// Scheduling modes (scheduler.mode).
const (
	// ModeFair dispatches through the dispatcher.
	ModeFair = "fair"
	// ModeFIFO dispatches every turn as it becomes ready, first come first
	// served, with no dispatcher: the queue alone orders turns.
	ModeFIFO = "fifo"
)

// Config is the [scheduler] section of the configuration.
type Config struct {
	// Mode is "fair" (the default) or "fifo". Every process of a
	// deployment must run the same mode.
	Mode string `toml:"mode"`
	// MaxRunningTurnsPerOrganization caps an organization's turns running
	// at once (dispatched or running); 0 is no cap. An organization's
	// max_running_turns overrides it.
	MaxRunningTurnsPerOrganization int `toml:"max_running_turns_per_organization"`
	// MaxRunningTurnsPerProject caps a project's; a project's
	// max_running_turns overrides it.
	MaxRunningTurnsPerProject int `toml:"max_running_turns_per_project"`
	// MaxRunningTurnsPerHuman caps one human's in one project; a project's
	// max_running_turns_per_human overrides it, else its organization's.
	MaxRunningTurnsPerHuman int `toml:"max_running_turns_per_human"`
}

// DefaultConfig returns the built-in defaults: fair, with no caps.
func DefaultConfig() Config { return Config{Mode: ModeFair} }

// maxCap bounds every cap.
const maxCap = 100000

// Validate reports the first invalid key of the section.
func (c Config) Validate() error {
	if c.Mode != ModeFair && c.Mode != ModeFIFO {
		return fmt.Errorf("scheduler.mode: must be %q or %q, got %q", ModeFair, ModeFIFO, c.Mode)
	}
	for _, k := range []struct {
		name string
		v    int
	}{
		{"max_running_turns_per_organization", c.MaxRunningTurnsPerOrganization},
		{"max_running_turns_per_project", c.MaxRunningTurnsPerProject},
		{"max_running_turns_per_human", c.MaxRunningTurnsPerHuman},
	} {
		if k.v < 0 || k.v > maxCap {
			return fmt.Errorf("scheduler.%s: must be 0 (no cap) to %d, got %d", k.name, maxCap, k.v)
		}
	}
	return nil
}

// Fair reports whether turns go through the dispatcher.
func (c Config) Fair() bool { return c.Mode != ModeFIFO }

// caps are the configured default caps.
func (c Config) caps() Caps {
	return Caps{Organization: c.MaxRunningTurnsPerOrganization, Project: c.MaxRunningTurnsPerProject, Human: c.MaxRunningTurnsPerHuman}
}
