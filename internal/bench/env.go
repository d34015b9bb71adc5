package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/pgserver"
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

// env is what every scenario shares: the server, the two template
// databases, loggers and the options.
type env struct {
	opts  Opts
	log   *slog.Logger // progress
	quiet *slog.Logger // River and the fan-out: warnings and errors only

	server     *pgserver.Server // nil with Opts.DatabaseURL
	adminURL   string
	admin      *pgx.Conn
	prefix     string
	counter    int
	templates  map[schema]string
	serverDesc string
	pgVersion  string

	// statements: the server tracks statements (pg_stat_statements is
	// loaded, and created in every template), so the latency and drain
	// scenarios report the database time per event or job (statements.go).
	statements bool
}

func newEnv(ctx context.Context, o Opts) (_ *env, err error) {
	e := &env{
		opts:      o,
		log:       o.Logger,
		quiet:     slog.New(benchkit.MinLevel(o.Logger.Handler(), slog.LevelWarn)),
		prefix:    fmt.Sprintf("rbbench_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000),
		templates: map[schema]string{},
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	e.adminURL = o.DatabaseURL
	if e.adminURL == "" {
		srv, err := benchkit.StartServer(ctx, e.log, "bench")
		if err != nil {
			return nil, err
		}
		e.server = srv
		e.adminURL = srv.URL("postgres")
	}
	if e.admin, err = pgx.Connect(ctx, e.adminURL); err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	if e.serverDesc, e.pgVersion, err = benchkit.DescribeServer(ctx, e.admin, e.server != nil); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}

	e.statements = true // unless a template cannot have them
	for _, s := range []schema{schemaRiverbus, schemaRiver} {
		if err := e.createTemplate(ctx, s); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *env) createTemplate(ctx context.Context, s schema) error {
	name := fmt.Sprintf("%s_tpl%d", e.prefix, s)
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+benchkit.Ident(name)); err != nil {
		return fmt.Errorf("bench: create template database: %w", err)
	}
	e.templates[s] = name
	pool, err := pgxpool.New(ctx, benchkit.WithDatabase(e.adminURL, name))
	if err != nil {
		return fmt.Errorf("bench: connect to template: %w", err)
	}
	defer pool.Close()
	if !benchkit.CreateStatementsExtension(ctx, pool) {
		e.statements = false
	}
	if s == schemaRiverbus {
		if _, err := migrations.Up(ctx, pool); err != nil {
			return fmt.Errorf("bench: migrate template: %w", err)
		}
		return nil
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: e.quiet})
	if err != nil {
		return fmt.Errorf("bench: river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("bench: migrate River template: %w", err)
	}
	return nil
}

func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.admin != nil {
		for _, name := range e.templates {
			_, _ = e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+benchkit.Ident(name)+" WITH (FORCE)")
		}
		_ = e.admin.Close(ctx)
	}
	if e.server != nil {
		_ = e.server.Stop()
	}
}

// database is a fresh database for one measurement.
type database struct {
	e    *env
	name string
	url  string
}

// newDatabase creates a fresh database from the template of schema s.
func (e *env) newDatabase(ctx context.Context, s schema) (*database, error) {
	e.counter++
	name := fmt.Sprintf("%s_%d", e.prefix, e.counter)
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+benchkit.Ident(name)+" TEMPLATE "+benchkit.Ident(e.templates[s])); err != nil {
		return nil, fmt.Errorf("create database from template: %w", err)
	}
	return &database{e: e, name: name, url: benchkit.WithDatabase(e.adminURL, name)}, nil
}

// drop drops the database, closing connections still open to it.
func (d *database) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := d.e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+benchkit.Ident(d.name)+" WITH (FORCE)"); err != nil {
		d.e.log.Warn("bench: drop database", "database", d.name, "error", err)
	}
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

// settle analyzes the database and checkpoints the server, so that neither
// autovacuum's first analyze nor a checkpoint lands in a timed phase more
// often on one side than the other.
func (d *database) settle(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	if _, err := d.e.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		d.e.log.Debug("bench: CHECKPOINT not allowed; timings may include one", "error", err)
	}
	return nil
}

// scaled returns n×Scale, at least lo.
func (e *env) scaled(n int, lo int) int {
	return max(lo, int(math.Round(float64(n)*e.opts.Scale)))
}

// riverbusFirst reports whether riverbus goes first in run i: A/B, B/A, …
func riverbusFirst(run int) bool { return run%2 == 0 }
