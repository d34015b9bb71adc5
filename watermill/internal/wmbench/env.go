package wmbench

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/migrations"
)

// env is what every scenario shares (benchkit.Env) and the riverbus
// template database.
type env struct {
	*benchkit.Env
	template string // migrated with migrations.Up: riverbus's databases

	// statements: the server tracks statements (pg_stat_statements is
	// loaded and the user may turn tracking on per database), so the
	// scenarios report the database time and statements per message.
	statements bool
	// scenario is the scenario being measured (each scenario measures
	// with a copy of env of its own); top the statements that took the
	// most time in each phase measured so far.
	scenario string
	top      *tops
}

// tops are TopStatements recorded by scenarios that may run at once.
type tops struct {
	mu   sync.Mutex
	list []TopStatements
}

// newEnv starts the bench with opts (benchkit.NewEnv) and creates the
// riverbus template; it returns the names of the scenarios to run.
func newEnv(ctx context.Context, opts Opts) (*env, []string, error) {
	kit, names, err := benchkit.NewEnv(ctx, "wmbench", opts, defaults, ScenarioNames())
	if err != nil {
		return nil, nil, err
	}
	e := &env{Env: kit, top: &tops{}}
	if e.template, e.statements, err = e.CreateTemplate(ctx, func(ctx context.Context, db *pgxpool.Pool) error {
		_, err := migrations.Up(ctx, db)
		return err
	}); err != nil {
		e.Close()
		return nil, nil, err
	}
	return e, names, nil
}

// database is a fresh database for one measurement of one side, with
// statement tracking on when the server allows it.
type database struct {
	*benchkit.Database
	e    *env
	side impl
	// stats reads pg_stat_statements for the database: a session opened
	// before tracking was turned on, so its own statements do not count.
	// Nil when the database's statements are not tracked.
	stats *pgx.Conn
}

// newDatabase creates a fresh database for side: from the migrated
// template for riverbus, empty for watermill-sql, whose subscriber creates
// its tables (InitializeSchema).
func (e *env) newDatabase(ctx context.Context, side impl) (*database, error) {
	template := ""
	if side == implRiverbus {
		template = e.template
	}
	kd, err := e.NewDatabase(ctx, template)
	if err != nil {
		return nil, err
	}
	d := &database{Database: kd, e: e, side: side}
	if e.statements {
		if err := d.trackStatements(ctx); err != nil {
			e.Log.Debug("wmbench: statement tracking unavailable", "error", err)
		}
	}
	return d, nil
}

// drop drops the database, closing its statements session first.
func (d *database) drop() {
	if d.stats != nil {
		_ = d.stats.Close(context.Background())
	}
	d.Drop()
}
