package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverbus/riverbus/internal/database"
)

// SchemaTooNewError says that the schema needs newer code than this
// process runs: a newer build migrated it (a rolling upgrade). The process
// stops delivering; an orchestrator replaces it with the newer build.
type SchemaTooNewError struct {
	// Schema is the schema's version: the newest migration applied.
	Schema int
	// Needs is the oldest code version that may run against it.
	Needs int
	// Code is the newest migration this process's code knows.
	Code int
}

func (e *SchemaTooNewError) Error() string {
	if e.Needs == e.Schema {
		return fmt.Sprintf("riverbus schema version %d is newer than this code knows (%d): replace this process with a build that knows schema version %d",
			e.Schema, e.Code, e.Schema)
	}
	return fmt.Sprintf("riverbus schema version %d needs code that knows version %d or newer; this code knows %d: replace this process with a newer build",
		e.Schema, e.Needs, e.Code)
}

// SchemaTooNewCode is the SQLSTATE riverbus_schema_check raises (class 55,
// object not in prerequisite state).
const SchemaTooNewCode = "55RBV"

// SQLSchemaCheck is the first statement of every delivering transaction
// (a horizon round, a pool batch, a retention batch), with $1 the code's
// version: it fails with SchemaTooNewCode, aborting the transaction before
// it changes anything, when the schema needs newer code, and it makes a
// migration that needs newer code wait for the transaction (handOver).
const SQLSchemaCheck = `SELECT riverbus_schema_check($1)`

// AsSchemaTooNew returns the *SchemaTooNewError in err: one returned by
// Check, or riverbus_schema_check's error (SchemaTooNewCode), or nil.
func AsSchemaTooNew(err error) *SchemaTooNewError {
	var tooNew *SchemaTooNewError
	if errors.As(err, &tooNew) {
		return tooNew
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != SchemaTooNewCode {
		return nil
	}
	e := &SchemaTooNewError{}
	if _, err := fmt.Sscanf(pgErr.Detail, "schema=%d needs=%d code=%d", &e.Schema, &e.Needs, &e.Code); err != nil {
		// Still the refusal it is; the message says the versions.
		return &SchemaTooNewError{}
	}
	return e
}

// Check returns a *SchemaTooNewError when the schema needs newer code than
// code (the newest migration a build knows), or an error wrapping
// ErrOlderSchema when the schema is older than code, or nil. It reads the
// versions without a lock: Start and the watchers of processes that hold
// no delivering transaction use it.
func Check(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, code int) error {
	var schema, needs int
	if err := db.QueryRow(ctx, sqlSchemaVersions).Scan(&schema, &needs); err != nil {
		if database.IsCode(err, pgerrcode.UndefinedTable) {
			return fmt.Errorf("%w: no riverbus schema; this build needs version %d", ErrOlderSchema, code)
		}
		if database.IsCode(err, pgerrcode.UndefinedColumn) {
			// Migrated by a build from before SchemaCheckVersion.
			schema, err := Version(ctx, db)
			if err != nil {
				return fmt.Errorf("read the schema version: %w", err)
			}
			return fmt.Errorf("%w: schema version %d, this build needs %d", ErrOlderSchema, schema, code)
		}
		return fmt.Errorf("read the schema version: %w", err)
	}
	if needs > code {
		return &SchemaTooNewError{Schema: schema, Needs: needs, Code: code}
	}
	if schema < code {
		return fmt.Errorf("%w: schema version %d, this build needs %d", ErrOlderSchema, schema, code)
	}
	return nil
}

// ErrOlderSchema is wrapped by Check's error when the schema is older than
// the code: run the migrations (riverbus migrate) first.
var ErrOlderSchema = errors.New("the riverbus schema is older than this build")
