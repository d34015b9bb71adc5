package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/migrations"
)

// schema says which template a measurement's database is created from.
type schema int

const (
	// schemaRiverbus: River's migrations and riverbus's (migrations.Up).
	schemaRiverbus schema = iota
	// schemaRiver: River's migrations alone, for raw River baselines.
	schemaRiver
)

// env is what every scenario shares (benchkit.Env) and the two template
// databases.
type env struct {
	*benchkit.Env
	templates map[schema]string

	// statements: the server tracks statements (pg_stat_statements is
	// loaded, and created in every template), so the latency and drain
	// scenarios report the database time per event or job (statements.go).
	statements bool
}

// newEnv starts the bench with opts (benchkit.NewEnv) and creates the
// templates; it returns the names of the scenarios to run.
func newEnv(ctx context.Context, opts Opts) (_ *env, names []string, err error) {
	kit, names, err := benchkit.NewEnv(ctx, "bench", opts, defaults, ScenarioNames())
	if err != nil {
		return nil, nil, err
	}
	e := &env{Env: kit, templates: map[schema]string{}, statements: true}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	migrate := map[schema]func(ctx context.Context, db *pgxpool.Pool) error{
		schemaRiverbus: func(ctx context.Context, db *pgxpool.Pool) error {
			_, err := migrations.Up(ctx, db)
			return err
		},
		schemaRiver: func(ctx context.Context, db *pgxpool.Pool) error {
			migrator, err := rivermigrate.New(riverpgxv5.New(db), &rivermigrate.Config{Logger: e.Quiet})
			if err != nil {
				return fmt.Errorf("river migrator: %w", err)
			}
			_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
			return err
		},
	}
	for _, s := range []schema{schemaRiverbus, schemaRiver} {
		name, statements, err := e.CreateTemplate(ctx, migrate[s])
		if err != nil {
			return nil, nil, err
		}
		e.templates[s] = name
		e.statements = e.statements && statements
	}
	return e, names, nil
}

// database is a fresh database for one measurement.
type database struct {
	*benchkit.Database
	e *env
}

// newDatabase creates a fresh database from the template of schema s.
func (e *env) newDatabase(ctx context.Context, s schema) (*database, error) {
	d, err := e.NewDatabase(ctx, e.templates[s])
	if err != nil {
		return nil, err
	}
	return &database{Database: d, e: e}, nil
}

// open creates a fresh database from the template of schema s and opens a
// pool of at most conns connections to it; release closes the pool and
// drops the database.
func (e *env) open(ctx context.Context, s schema, conns int32) (d *database, db *pgxpool.Pool, release func(), err error) {
	if d, err = e.newDatabase(ctx, s); err != nil {
		return nil, nil, nil, err
	}
	if db, err = d.Connect(ctx, conns); err != nil {
		d.Drop()
		return nil, nil, nil, err
	}
	return d, db, func() { db.Close(); d.Drop() }, nil
}

// least is benchkit.Least under the run's options: real, or smoke in a
// smoke run.
func least[T any](e *env, real, smoke T) T { return benchkit.Least(e.Opts, real, smoke) }

// latencyDuration is how long a latency measurement sends events at its
// rate: latencyDuration scaled, at least latencyDurationMin.
func (e *env) latencyDuration() time.Duration {
	return e.ScaledDuration(latencyDuration, least(e, latencyDurationMin, 100*time.Millisecond))
}

// riverbusFirst reports whether riverbus goes first in run i: A/B, B/A, …
func riverbusFirst(run int) bool { return run%2 == 0 }
