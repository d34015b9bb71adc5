package benchkit

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/pgserver"
)

// Env is what a bench's scenarios share: the server, a superuser's session
// on it, the templates their databases are created from, the loggers and
// the options.
type Env struct {
	Opts  Opts
	Log   *slog.Logger // progress
	Quiet *slog.Logger // what the bench runs (River, the fan-out, …): warnings and errors only
	// AdminURL is a superuser's URL of the server.
	AdminURL string

	// mu guards admin, a session of that superuser, and counter: a smoke
	// run's scenarios run two at a time.
	mu      sync.Mutex
	admin   *pgx.Conn
	counter int

	name       string           // the bench's: prefixes its messages and its databases' names
	server     *pgserver.Server // nil with Opts.DatabaseURL
	serverDesc string
	pgVersion  string
	prefix     string // of the databases' names
	templates  []string
	started    time.Time
	load0      float64 // the load average when the run started; -1: unknown
	// drops takes the databases a smoke run drops in the background, one
	// at a time on a session of its own; dropped closes when it is done.
	drops   chan string
	dropped chan struct{}
}

// NewEnv starts a bench named name (it prefixes the messages, errors and
// database names) with opts, normalized (Opts.Normalize) with its defaults d
// and its scenarios' names: a throwaway server unless Opts.DatabaseURL
// names one, and a superuser's session on it. It returns the names of the
// scenarios to run. Close releases it all.
func NewEnv(ctx context.Context, name string, opts Opts, d Defaults, names []string) (_ *Env, selected []string, err error) {
	o, selected, err := opts.Normalize(d, names)
	if err != nil {
		return nil, nil, err
	}
	e := &Env{
		Opts:    o,
		Log:     o.Logger,
		Quiet:   slog.New(MinLevel(o.Logger.Handler(), slog.LevelWarn)),
		name:    name,
		prefix:  fmt.Sprintf("%s_%d_%d", name, os.Getpid(), time.Now().UnixNano()%1_000_000),
		started: time.Now(),
		load0:   LoadAverage(),
	}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	e.AdminURL = o.DatabaseURL
	if e.AdminURL == "" {
		if e.server, err = e.startServer(ctx); err != nil {
			return nil, nil, err
		}
		e.AdminURL = e.server.URL("postgres")
	}
	if e.admin, err = pgx.Connect(ctx, e.AdminURL); err != nil {
		return nil, nil, fmt.Errorf("%s: connect: %w", name, err)
	}
	if e.serverDesc, e.pgVersion, err = describeServer(ctx, e.admin, e.server != nil); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if o.Smoke {
		conn, err := pgx.Connect(ctx, e.AdminURL)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: connect: %w", name, err)
		}
		e.drops, e.dropped = make(chan string, 100), make(chan struct{})
		go func() {
			defer close(e.dropped)
			defer conn.Close(context.Background())
			for db := range e.drops {
				e.drop(conn, db)
			}
		}()
	}
	return e, selected, nil
}

// startServer starts the benches' throwaway PostgreSQL: durable (fsync and
// synchronous_commit on, PostgreSQL's default durability) except for a
// smoke run, shared_buffers 256MB, so that runs on different machines
// compare, and pg_stat_statements loaded when PostgreSQL ships it, tracking
// nothing except in the databases that ask for it (TrackStatements): the
// measurements that do not read it pay nothing measurable.
func (e *Env) startServer(ctx context.Context) (*pgserver.Server, error) {
	durable := !e.Opts.Smoke
	if durable {
		e.Log.Info(e.name + ": starting a throwaway PostgreSQL (durable: fsync and synchronous_commit on)")
	} else {
		e.Log.Info(e.name + ": starting a throwaway PostgreSQL (smoke run: fsync off)")
	}
	settings := map[string]string{"shared_buffers": "256MB"}
	if pgserver.HasLibrary("pg_stat_statements") {
		settings["shared_preload_libraries"] = "pg_stat_statements"
		settings["pg_stat_statements.track"] = "none"
	}
	srv, err := pgserver.Start(ctx, pgserver.Opts{
		Durable:  durable,
		Settings: settings,
		Logf:     func(format string, args ...any) { e.Log.Info(e.name + ": " + fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return nil, fmt.Errorf("%s: start PostgreSQL: %w", e.name, err)
	}
	return srv, nil
}

// describeServer returns the server's version and a description of it and
// its durability settings for a report; throwaway says whether it is
// startServer's.
func describeServer(ctx context.Context, admin *pgx.Conn, throwaway bool) (desc, version string, err error) {
	var fsync, syncCommit, sharedBuffers string
	if err := admin.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('shared_buffers')`).Scan(&version, &fsync, &syncCommit, &sharedBuffers); err != nil {
		return "", "", fmt.Errorf("read server settings: %w", err)
	}
	where := "DATABASE_URL server"
	if throwaway {
		where = "throwaway server"
	}
	desc = fmt.Sprintf("PostgreSQL %s (%s; fsync %s, synchronous_commit %s, shared_buffers %s)",
		strings.Fields(version)[0], where, fsync, syncCommit, sharedBuffers)
	return desc, version, nil
}

// CreateTemplate creates a database for NewDatabase to copy, with
// pg_stat_statements created in it when the server can track statements,
// which it reports, and migrate run over a pool to it. Close drops it.
func (e *Env) CreateTemplate(ctx context.Context, migrate func(ctx context.Context, db *pgxpool.Pool) error) (name string, statements bool, err error) {
	name = fmt.Sprintf("%s_tpl%d", e.prefix, len(e.templates))
	if err := e.exec(ctx, "CREATE DATABASE "+Ident(name)); err != nil {
		return "", false, fmt.Errorf("%s: create template database: %w", e.name, err)
	}
	e.templates = append(e.templates, name)
	pool, err := pgxpool.New(ctx, pgserver.WithDatabase(e.AdminURL, name))
	if err != nil {
		return "", false, fmt.Errorf("%s: connect to template: %w", e.name, err)
	}
	defer pool.Close()
	statements = CreateStatementsExtension(ctx, pool)
	if err := migrate(ctx, pool); err != nil {
		return "", false, fmt.Errorf("%s: migrate template: %w", e.name, err)
	}
	return name, statements, nil
}

// Close waits for the databases dropped in the background, drops the
// templates, and stops the throwaway server.
func (e *Env) Close() {
	if e.drops != nil {
		close(e.drops)
		<-e.dropped
		e.drops = nil
	}
	if e.admin != nil {
		for _, name := range e.templates {
			e.drop(e.admin, name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.admin.Close(ctx)
	}
	if e.server != nil {
		_ = e.server.Stop()
	}
}

// drop drops database name on conn, closing the sessions still open to it.
func (e *Env) drop(conn *pgx.Conn, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+Ident(name)+" WITH (FORCE)"); err != nil {
		e.Log.Warn(e.name+": drop database", "database", name, "error", err)
	}
}

// Database is a fresh database for one measurement.
type Database struct {
	Env  *Env
	Name string
	URL  string
}

// NewDatabase creates a fresh database from template (CreateTemplate), or
// an empty one when template is empty.
func (e *Env) NewDatabase(ctx context.Context, template string) (*Database, error) {
	e.mu.Lock()
	e.counter++
	name := fmt.Sprintf("%s_%d", e.prefix, e.counter)
	e.mu.Unlock()
	create := "CREATE DATABASE " + Ident(name)
	if template != "" {
		create += " TEMPLATE " + Ident(template)
	}
	if err := e.exec(ctx, create); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	return &Database{Env: e, Name: name, URL: pgserver.WithDatabase(e.AdminURL, name)}, nil
}

// Drop drops the database, closing the sessions still open to it; a smoke
// run drops it in the background (Close waits), where DROP DATABASE's wait
// for the sessions just closed to end costs no time.
func (d *Database) Drop() {
	if d.Env.drops != nil {
		d.Env.drops <- d.Name
		return
	}
	d.Env.mu.Lock()
	defer d.Env.mu.Unlock()
	d.Env.drop(d.Env.admin, d.Name)
}

// Connect opens a pool of at most maxConns connections to the database.
func (d *Database) Connect(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(d.URL)
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

// Settle analyzes the database and checkpoints the server, so that neither
// autovacuum's first analyze nor a checkpoint lands in a timed phase more
// often on one side than the other. A smoke run skips both: they only
// steady the timings, and they cost it more than most of what it measures.
func (d *Database) Settle(ctx context.Context, db *pgxpool.Pool) error {
	if d.Env.Opts.Smoke {
		return nil
	}
	if _, err := db.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	if err := d.Env.exec(ctx, "CHECKPOINT"); err != nil {
		d.Env.Log.Debug(d.Env.name+": CHECKPOINT not allowed; timings may include one", "error", err)
	}
	return nil
}

// TrackStatements makes the sessions opened to the database from now on
// track their top-level statements (TrackStatements).
func (d *Database) TrackStatements(ctx context.Context) error {
	d.Env.mu.Lock()
	defer d.Env.mu.Unlock()
	return TrackStatements(ctx, d.Env.admin, d.Name)
}

// exec runs sql on the superuser's session.
func (e *Env) exec(ctx context.Context, sql string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err := e.admin.Exec(ctx, sql)
	return err
}

// Scaled returns n×Scale, at least lo.
func (e *Env) Scaled(n, lo int) int {
	return max(lo, int(math.Round(float64(n)*e.Opts.Scale)))
}

// ScaledDuration returns d×Scale, at least lo.
func (e *Env) ScaledDuration(d, lo time.Duration) time.Duration {
	return max(lo, time.Duration(float64(d)*e.Opts.Scale))
}

// Least returns smoke in a smoke run (Opts.Smoke), else real: a smaller
// minimum size, duration, window or rate that still runs a scenario's
// code when its figures do not count.
func Least[T any](o Opts, real, smoke T) T {
	if o.Smoke {
		return smoke
	}
	return real
}

// LoadAverage returns the machine's 1-minute load average, where Linux
// tells it, else -1.
func LoadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return -1
	}
	return l
}
