// Package worker runs planner turns: the asynq server and its handlers, the
// model and tool rounds, compaction, limits, cancel and resume.
package worker

import (
	"errors"
	"fmt"
	"time"
)

// Config is the [worker] section of the configuration.
type Config struct {
	// Addr is where a standalone worker serves /healthz and /readyz; its
	// metrics are on the process's metrics listener (metrics.addr).
	Addr string `toml:"addr"`
	// Concurrency is how many turns one worker runs at once; turns wait on
	// the model, so hundreds is normal.
	Concurrency int `toml:"concurrency"`
	// ShutdownTimeout is how long a stopping worker gives its running turns
	// before it cuts them off and hands them back.
	ShutdownTimeout time.Duration `toml:"shutdown_timeout"`
	// Lease is how long a session's turn lease lasts without renewal; a
	// crashed worker's turn resumes elsewhere after it.
	Lease time.Duration `toml:"lease"`
	// HeartbeatInterval is how often a worker process records that it is
	// alive; one write per worker, whatever number of turns it runs.
	HeartbeatInterval time.Duration `toml:"heartbeat_interval"`
	// HeartbeatTimeout is how long a worker's beat holds: a worker silent
	// for longer is taken for dead and its turns resume elsewhere.
	HeartbeatTimeout time.Duration `toml:"heartbeat_timeout"`
	// TaskCheckInterval is how often an idle worker polls its queues.
	TaskCheckInterval time.Duration `toml:"task_check_interval"`
	// TurnTimeout bounds one turn.
	TurnTimeout time.Duration `toml:"turn_timeout"`
	// ModelRetries is how many times a turn calls the model again, within
	// the same attempt, after a call that never reached an answer (the
	// gateway refused the connection or dropped it mid-stream: restarted,
	// say); after the last, the attempt fails and the turn resumes as after
	// a crash. The gateway's own refusals are answers and are not retried.
	ModelRetries int `toml:"model_retries"`
	// ModelRetryWait is the wait before the first retry; each next wait
	// doubles, up to 30s, give or take a tenth at random.
	ModelRetryWait time.Duration `toml:"model_retry_wait"`
	// ModelUnavailableFor is how long a turn waits out a gateway that
	// answers 503 or 529 (its database or the provider is unavailable for a
	// while): it calls again after each answer's Retry-After (at least 1s,
	// at most 30s) until this much time has passed since the first, then
	// the turn fails as before. These calls are not model_retries.
	ModelUnavailableFor time.Duration `toml:"model_unavailable_for"`
	// CompletedRetention is how long asynq keeps a completed turn or
	// embedding task, so that the dashboard's Completed tab lists it with
	// how it ended; 0 deletes each as it completes. Each costs about 0.9 KB
	// of Redis while kept (docs/operations.md, "The asynq dashboard").
	CompletedRetention time.Duration `toml:"completed_retention"`
}

// Bounds of the model retries: a turn never waits on a gateway that is
// gone for longer than about ten minutes within one attempt.
const (
	maxModelRetries        = 20
	maxModelRetryWait      = 30 * time.Second
	maxModelUnavailableFor = 15 * time.Minute
	maxCompletedRetention  = 24 * time.Hour
)

// DefaultConfig returns the built-in worker defaults.
func DefaultConfig() Config {
	return Config{
		Addr:              ":8081",
		Concurrency:       500,
		ShutdownTimeout:   10 * time.Second,
		Lease:             15 * time.Second,
		HeartbeatInterval: time.Second,
		HeartbeatTimeout:  3 * time.Second,
		TaskCheckInterval: 5 * time.Millisecond,
		TurnTimeout:       30 * time.Minute,
		ModelRetries:      4,
		ModelRetryWait:    time.Second,

		ModelUnavailableFor: 5 * time.Minute,
		CompletedRetention:  10 * time.Minute,
	}
}

// Validate reports the first invalid key of the section.
func (c Config) Validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("worker.concurrency: must be at least 1, got %d", c.Concurrency)
	case c.ShutdownTimeout <= 0:
		return errors.New("worker.shutdown_timeout: must be positive")
	case c.Lease < time.Second:
		return errors.New("worker.lease: must be at least 1s")
	case c.HeartbeatInterval < 10*time.Millisecond:
		return fmt.Errorf("worker.heartbeat_interval: must be at least 10ms, got %s", c.HeartbeatInterval)
	case c.HeartbeatTimeout < 2*c.HeartbeatInterval:
		return fmt.Errorf("worker.heartbeat_timeout: must be at least twice worker.heartbeat_interval (%s), got %s",
			c.HeartbeatInterval, c.HeartbeatTimeout)
	case c.TaskCheckInterval <= 0:
		return errors.New("worker.task_check_interval: must be positive")
	case c.TurnTimeout < time.Second:
		return errors.New("worker.turn_timeout: must be at least 1s")
	case c.ModelRetries < 0 || c.ModelRetries > maxModelRetries:
		return fmt.Errorf("worker.model_retries: must be 0-%d, got %d", maxModelRetries, c.ModelRetries)
	case c.ModelRetryWait < time.Millisecond || c.ModelRetryWait > maxModelRetryWait:
		return fmt.Errorf("worker.model_retry_wait: must be 1ms-%s, got %s", maxModelRetryWait, c.ModelRetryWait)
	case c.ModelUnavailableFor < 0 || c.ModelUnavailableFor > maxModelUnavailableFor:
		return fmt.Errorf("worker.model_unavailable_for: must be 0-%s, got %s", maxModelUnavailableFor, c.ModelUnavailableFor)
	case c.CompletedRetention < 0 || c.CompletedRetention > maxCompletedRetention:
		return fmt.Errorf("worker.completed_retention: must be 0-%s, got %s", maxCompletedRetention, c.CompletedRetention)
	}
	return nil
}

// PlannerConfig is the [planner] section of SPEC §1.
type PlannerConfig struct {
	// Model is the model every planner call asks for.
	Model string `toml:"model"`
	// MaxTokens caps one model answer.
	MaxTokens int `toml:"max_tokens"`
	// MaxRounds caps tool rounds per turn.
	MaxRounds int `toml:"max_rounds"`
	// Skill is the skill joined to the system prompt.
	Skill string `toml:"skill"`
	// CompactAtTokens is the estimated context size that triggers
	// compaction; 0 turns compaction off.
	CompactAtTokens int `toml:"compact_at_tokens"`
	// MaxToolInputBytes caps the input of one tool call that a model answer
	// may store; a larger one is refused as an error result.
	MaxToolInputBytes int `toml:"max_tool_input_bytes"`
	// PromptCaching marks prompt-caching breakpoints on planner calls (the
	// tools, the system prompt and the conversation so far), so that an
	// Anthropic upstream bills the repeated prefix as cache reads.
	PromptCaching bool `toml:"prompt_caching"`
}

// DefaultPlannerConfig returns the defaults of SPEC §1.
func DefaultPlannerConfig() PlannerConfig {
	return PlannerConfig{
		Model:             "claude-sonnet-5-5",
		MaxTokens:         8192,
		MaxRounds:         20,
		Skill:             "planner",
		CompactAtTokens:   100000,
		MaxToolInputBytes: 256 << 10,
		PromptCaching:     true,
	}
}

// Validate reports the first invalid key of the section.
func (c PlannerConfig) Validate() error {
	switch {
	case c.Model == "":
		return errors.New("planner.model: must not be empty")
	case c.MaxTokens < 1:
		return fmt.Errorf("planner.max_tokens: must be at least 1, got %d", c.MaxTokens)
	case c.MaxRounds < 1:
		return fmt.Errorf("planner.max_rounds: must be at least 1, got %d", c.MaxRounds)
	case c.CompactAtTokens < 0:
		return fmt.Errorf("planner.compact_at_tokens: must be at least 0, got %d", c.CompactAtTokens)
	case c.MaxToolInputBytes < 1024:
		return fmt.Errorf("planner.max_tool_input_bytes: must be at least 1024, got %d", c.MaxToolInputBytes)
	}
	return nil
}
