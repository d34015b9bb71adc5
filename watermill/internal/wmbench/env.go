package wmbench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/migrations"
)

// env is what every scenario shares: the server, the riverbus template
// database, loggers and the options.
type env struct {
	opts  Opts
	log   *slog.Logger // progress
	quiet *slog.Logger // River, the fan-out, watermill-sql: warnings and errors only

	server     *pgserver.Server // nil with Opts.DatabaseURL
	adminURL   string
	admin      *pgx.Conn
	prefix     string
	counter    int
	template   string // migrated with migrations.Up: riverbus's databases
	serverDesc string
	pgVersion  string

	// statements: the server tracks statements (pg_stat_statements is
	// loaded and the user may turn tracking on per database), so the
	// scenarios report the database time and statements per message.
	statements bool
	// scenario is the scenario being measured; top the statements that
	// took the most time in each phase measured so far.
	scenario string
	top      []TopStatements
}

func newEnv(ctx context.Context, o Opts) (_ *env, err error) {
	e := &env{
		opts:   o,
		log:    o.Logger,
		quiet:  slog.New(benchkit.MinLevel(o.Logger.Handler(), slog.LevelWarn)),
		prefix: fmt.Sprintf("wmbench_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000),
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	e.adminURL = o.DatabaseURL
	if e.adminURL == "" {
		srv, err := benchkit.StartServer(ctx, e.log, "wmbench")
		if err != nil {
			return nil, err
		}
		e.server = srv
		e.adminURL = srv.URL("postgres")
	}
	if e.admin, err = pgx.Connect(ctx, e.adminURL); err != nil {
		return nil, fmt.Errorf("wmbench: connect: %w", err)
	}
	if e.serverDesc, e.pgVersion, err = benchkit.DescribeServer(ctx, e.admin, e.server != nil); err != nil {
		return nil, fmt.Errorf("wmbench: %w", err)
	}

	e.template = e.prefix + "_tpl"
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+benchkit.Ident(e.template)); err != nil {
		e.template = ""
		return nil, fmt.Errorf("wmbench: create the riverbus template database: %w", err)
	}
	pool, err := pgxpool.New(ctx, benchkit.WithDatabase(e.adminURL, e.template))
	if err != nil {
		return nil, fmt.Errorf("wmbench: connect to the template: %w", err)
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool); err != nil {
		return nil, fmt.Errorf("wmbench: migrate the riverbus template: %w", err)
	}
	e.statements = benchkit.CreateStatementsExtension(ctx, pool)
	return e, nil
}

func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.admin != nil {
		if e.template != "" {
			_, _ = e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+benchkit.Ident(e.template)+" WITH (FORCE)")
		}
		_ = e.admin.Close(ctx)
	}
	if e.server != nil {
		_ = e.server.Stop()
	}
}

// database is a fresh database for one measurement of one side, with
// statement tracking on when the server allows it.
type database struct {
	e    *env
	side impl
	name string
	url  string
	// stats reads pg_stat_statements for the database: a session opened
	// before tracking was turned on, so its own statements do not count.
	// Nil when the database's statements are not tracked.
	stats *pgx.Conn
}

// newDatabase creates a fresh database for side: from the migrated
// template for riverbus, empty for watermill-sql, whose subscriber creates
// its tables (InitializeSchema).
func (e *env) newDatabase(ctx context.Context, side impl) (_ *database, err error) {
	e.counter++
	name := fmt.Sprintf("%s_%d", e.prefix, e.counter)
	create := "CREATE DATABASE " + benchkit.Ident(name)
	if side == implRiverbus {
		create += " TEMPLATE " + benchkit.Ident(e.template)
	}
	if _, err := e.admin.Exec(ctx, create); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	d := &database{e: e, side: side, name: name, url: benchkit.WithDatabase(e.adminURL, name)}
	defer func() {
		if err != nil {
			d.drop()
		}
	}()
	if e.statements {
		if err := d.trackStatements(ctx); err != nil {
			e.log.Debug("wmbench: statement tracking unavailable", "error", err)
		}
	}
	return d, nil
}

// connect opens a pool of at most maxConns connections to the database.
func (d *database) connect(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// drop drops the database, closing connections still open to it.
func (d *database) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if d.stats != nil {
		_ = d.stats.Close(ctx)
	}
	if _, err := d.e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+benchkit.Ident(d.name)+" WITH (FORCE)"); err != nil {
		d.e.log.Warn("wmbench: drop database", "database", d.name, "error", err)
	}
}

// settle analyzes the database and checkpoints the server, so that neither
// autovacuum's first analyze nor a checkpoint lands in a timed phase more
// often on one side than the other.
func (d *database) settle(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	if _, err := d.e.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		d.e.log.Debug("wmbench: CHECKPOINT not allowed; timings may include one", "error", err)
	}
	return nil
}

// scaled returns n×Scale, at least lo.
func (e *env) scaled(n int, lo int) int {
	return max(lo, int(math.Round(float64(n)*e.opts.Scale)))
}

// scaledDuration returns d×Scale, at least lo.
func (e *env) scaledDuration(d, lo time.Duration) time.Duration {
	return max(lo, time.Duration(float64(d)*e.opts.Scale))
}
