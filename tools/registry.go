// Package tools is the planner's hands: each tool has a name, a description
// written for the model, a JSON Schema, a permission and a call. Input is
// decoded strictly and validated against the very schema the model is
// given; every call acts as the human the planner works for, through the
// same store functions as REST.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/jackc/pgx/v5"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/balletplanner/ballet/store"
)

// Env is who and where a call acts: the human's principal with the planner
// as actor, the project and organization, and the session. DB is the
// store the tools read and write through.
type Env struct {
	DB      Store
	Caller  store.Caller
	Project store.Project
	Session string
	// Embedder embeds the queries of search_project and search_knowledge
	// for their semantic leg, metered to the session's project; nil leaves
	// both searches full-text and trigram only. The tenant scope of a
	// search is the caller's, whatever the Embedder.
	Embedder store.Embedder
	// Record, when set, stores the call's result in the transaction of a
	// writing tool's effect, so that a crash keeps both or neither; the
	// tools that write to Postgres call it through recorded.
	Record func(ctx context.Context, tx pgx.Tx, res Result) error
}

// embedders gives the store env.Embedder for whatever scope it meters a
// query to: the planner's searches are metered to the session's project,
// the knowledge search included. nil when there is no Embedder.
func (env Env) embedders() store.Embedders {
	e := env.Embedder
	if e == nil {
		return nil
	}
	return func(string, string) store.Embedder { return e }
}

// Definition is a tool as the model sees it.
type Definition struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Result is a tool call's answer: JSON text, or an error the model can act on.
type Result struct {
	Text    string
	IsError bool
}

// Tool is one tool: its definition, the permission it needs, and its call,
// which receives the validated input.
type Tool struct {
	Definition
	// Permission is what the human the planner acts for must hold on the
	// session's project for the registry to run Call at all; the store
	// functions Call uses check their own permissions again. Empty means
	// the tool needs none of its own.
	Permission store.Permission
	Call       func(ctx context.Context, env Env, input json.RawMessage) (any, error)

	schema *jsonschema.Schema
}

// Registry holds the tools by name.
type Registry struct {
	tools map[string]*Tool
	order []string
	log   *slog.Logger
}

// NewRegistry compiles every tool's schema; a bad schema is a programming
// error reported here rather than at call time.
func NewRegistry(log *slog.Logger, ts ...Tool) (*Registry, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Registry{tools: map[string]*Tool{}, log: log}
	c := jsonschema.NewCompiler()
	for i := range ts {
		t := ts[i]
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.InputSchema))
		if err != nil {
			return nil, fmt.Errorf("tools: %s: schema: %w", t.Name, err)
		}
		loc := "mem://tools/" + t.Name + ".json"
		if err := c.AddResource(loc, doc); err != nil {
			return nil, fmt.Errorf("tools: %s: schema: %w", t.Name, err)
		}
		if t.schema, err = c.Compile(loc); err != nil {
			return nil, fmt.Errorf("tools: %s: schema: %w", t.Name, err)
		}
		r.tools[t.Name] = &t
		r.order = append(r.order, t.Name)
	}
	sort.Strings(r.order)
	return r, nil
}

// Definitions lists the tools for the model, by name.
func (r *Registry) Definitions() []Definition {
	out := make([]Definition, 0, len(r.order))
	for _, n := range r.order {
		out = append(out, r.tools[n].Definition)
	}
	return out
}

// Call runs one tool call as env's human. It never panics and never returns
// a Go error: every failure is an error result the model can act on.
func (r *Registry) Call(ctx context.Context, env Env, name string, input json.RawMessage) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			r.log.ErrorContext(ctx, "tool panicked", slog.String("tool", name), slog.Any("panic", p))
			res = errorResult("internal error in %s; the call did not complete", name)
		}
	}()
	t, ok := r.tools[name]
	if !ok {
		return errorResult("unknown tool %q; the tools are: %s", name, strings.Join(r.order, ", "))
	}
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage(`{}`)
	}
	if msg := duplicateKey(input); msg != "" {
		return errorResult("invalid input: %s", msg)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return errorResult("invalid input: not a JSON object: %v", err)
	}
	if err := t.schema.Validate(doc); err != nil {
		return errorResult("invalid input: %s", describeSchemaError(err))
	}
	if err := permitted(env, t); err != nil {
		return r.failure(ctx, env, t, err)
	}
	out, err := t.Call(ctx, env, input)
	if err != nil {
		return r.failure(ctx, env, t, err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return r.failure(ctx, env, t, err)
	}
	return Result{Text: string(b)}
}

// permitted is the registry's gate in front of every call: the human env
// acts for must hold t's permission on env's project. A human who cannot
// see the project's organization at all finds the project missing.
func permitted(env Env, t *Tool) error {
	if t.Permission == "" {
		return nil
	}
	err := env.Caller.Authorize(t.Permission, env.Project.OrganizationID, env.Project.ID)
	return namedNotFound(err, "project %s not found", env.Project.Key)
}

// failure turns an error into a result the model can act on.
func (r *Registry) failure(ctx context.Context, env Env, t *Tool, err error) Result {
	var se *store.Error
	if !errors.As(err, &se) {
		r.log.ErrorContext(ctx, "tool failed", slog.String("tool", t.Name), slog.String("session", env.Session), slog.Any("error", err))
		return errorResult("internal error in %s; the call did not complete and may be retried later", t.Name)
	}
	switch se.Code {
	case store.CodeForbidden:
		return errorResult("forbidden: the human you act for (%s) may not do this: %s", env.Caller.Principal.Subject, se.Message)
	case store.CodeNotFound:
		return errorResult("not found: %s", se.Message)
	case store.CodeInvalid:
		return errorResult("invalid: %s", se.Message)
	case store.CodeConflict, store.CodeAlreadyExists:
		msg := "conflict: " + se.Message
		if v, ok := se.Details["current_version"]; ok && !strings.Contains(se.Message, "current") {
			msg += fmt.Sprintf(" (current version %v)", v)
		}
		return errorResult("%s", msg)
	}
	return errorResult("%s: %s", se.Code, se.Message)
}

func errorResult(format string, args ...any) Result {
	b, _ := json.Marshal(map[string]string{"error": fmt.Sprintf(format, args...)})
	return Result{Text: string(b), IsError: true}
}

var printer = message.NewPrinter(language.English)

// describeSchemaError names the field and why, in one line.
func describeSchemaError(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var parts []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + strings.Join(e.InstanceLocation, "/")
			parts = append(parts, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return strings.Join(parts, "; ")
}

// strictJSON reads input as the schema means it: keys exactly as named
// (no case folding), none given twice, none unknown.
var strictJSON = jsonv2.JoinOptions(
	jsonv2.RejectUnknownMembers(true),
	jsonv2.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
)

// duplicateKey names a key given twice in input, with where it is, or is ""
// when there is none. The schema cannot see duplicates: by the time it
// validates, the last one has silently won.
func duplicateKey(input json.RawMessage) string {
	err := jsontext.NewDecoder(bytes.NewReader(input), strictJSON).SkipValue()
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) || !errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return ""
	}
	return fmt.Sprintf("at %s: duplicate field %q", "/"+strings.TrimPrefix(string(se.JSONPointer.Parent()), "/"), se.JSONPointer.LastToken())
}

// Decode reads validated input into v strictly: unknown, duplicate or
// wrongly cased keys are refused.
func Decode(input json.RawMessage, v any) error {
	if err := jsonv2.Unmarshal(input, v, strictJSON); err != nil {
		return store.Errorf(store.CodeInvalid, "%v", strings.TrimPrefix(strings.TrimPrefix(err.Error(), "json: "), "jsontext: "))
	}
	return nil
}
