package benchkit

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
)

// Opts configures a bench's Run. Zero fields take their defaults.
type Opts struct {
	// DatabaseURL is a PostgreSQL server to measure on; its user must be
	// allowed to create databases. Every measurement gets a database of its
	// own, dropped afterwards. Empty: start a throwaway server (fsync and
	// synchronous_commit on: PostgreSQL's default durability) and stop it at
	// the end.
	DatabaseURL string
	// Runs is how many times each scenario is measured (each side, where a
	// scenario has two). Zero: the bench's default (Defaults.Runs).
	Runs int
	// Scale multiplies every size and duration: 1 is the full benchmark,
	// 0.1 a quick look. Sizes never go below a small minimum. Zero: 1.
	Scale float64
	// Scenarios selects scenarios by name. Empty: all.
	Scenarios []string
	// JSONPath is where the report is written as JSON; its directory is
	// created. Zero: the bench's default (Defaults.JSONPath).
	JSONPath string
	// Smoke runs every scenario at the least cost its code allows, for the
	// smoke tests that keep the benches from rotting: minimum sizes,
	// durations, windows and rates shrink below what gives a meaningful
	// figure (Least), a throwaway server is not durable, no ANALYZE and no
	// CHECKPOINT precede a timed phase, and databases are dropped in the
	// background.
	// Every scenario still runs all its code and reports all its rows, but
	// the figures mean nothing; the report says so.
	Smoke bool
	// Logger receives progress, and warnings from what the bench runs
	// (River, the fan-out, …). Nil: nothing is logged.
	Logger *slog.Logger
}

// Defaults are what a bench's zero Opts fields become, and how its
// command line names the environment variables of --database-url.
type Defaults struct {
	Runs     int
	JSONPath string
	// DatabaseEnv names the variables --database-url defaults to, for its
	// help: "$DATABASE_URL".
	DatabaseEnv string
}

// Normalize returns o with its zero fields filled from d and checked, and
// the names of the scenarios it selects among names (every one when
// o.Scenarios is empty), in the order of names.
func (o Opts) Normalize(d Defaults, names []string) (Opts, []string, error) {
	if o.Runs == 0 {
		o.Runs = d.Runs
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.JSONPath == "" {
		o.JSONPath = d.JSONPath
	}
	switch {
	case o.Runs < 1:
		return o, nil, fmt.Errorf("runs (--runs) must be at least 1, got %d", o.Runs)
	case o.Scale < 0 || math.IsNaN(o.Scale) || math.IsInf(o.Scale, 0):
		return o, nil, fmt.Errorf("scale (--scale) must be a positive number, got %v", o.Scale)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	for _, name := range o.Scenarios {
		if !slices.Contains(names, name) {
			return o, nil, fmt.Errorf("scenarios (--scenario): unknown scenario %q; scenarios are %s", name, strings.Join(names, ", "))
		}
	}
	if len(o.Scenarios) == 0 {
		return o, slices.Clone(names), nil
	}
	var selected []string
	for _, name := range names {
		if slices.Contains(o.Scenarios, name) {
			selected = append(selected, name)
		}
	}
	return o, selected, nil
}

// Names returns the name of each of items, in order: a bench's scenarios'.
func Names[T any](items []T, name func(T) string) []string {
	names := make([]string, len(items))
	for i, item := range items {
		names[i] = name(item)
	}
	return names
}
