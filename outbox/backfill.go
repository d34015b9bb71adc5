package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"golang.org/x/time/rate"
)

// Backfill turns an application's existing rows into events: the rows of
// a query, read in id order (keyset batches, never OFFSET), each batch
// appended in a transaction of its own together with the backfill's
// progress (riverbus_backfill, migration 026). See docs/backfill.md.
//
// Exactly once: each batch's transaction locks the backfill's progress
// row, checks that no other run moved it since the batch was read, appends
// the batch's events and records the batch's last id, so a run killed at
// any point (kill -9 included) and started again resumes after the last
// batch that committed, and two runs of one name take turns instead of
// appending a row twice. Each event's id is derived from the backfill's
// name and the row's id (BackfillEventID): a row whose event exists is not
// appended again, even by a run that lost its progress row, and is counted
// as already there.
//
// Each event has the backfill's Type and Version, the row's key, data, tags (and
// occurred_at, when the query returns one) plus the tag BackfillTag(name),
// and metadata naming the backfill and the row's id (BackfillMetadataName,
// BackfillMetadataID). Its sequence is new: it comes after every event
// committed before its batch, live ones included.
//
// The rows are read in READ ONLY transactions, so a query that would write
// fails instead. A query or row that cannot become an event is a
// *BackfillError (ErrInvalidBackfill) naming the row's id and the column,
// and nothing of its batch is appended: after a fix, a run resumes at that
// batch. Invalid params are a *ValidationError (ErrInvalidEvent).
//
// When ctx ends, Backfill lets a batch whose append has begun commit (or
// fail), appends no more, and returns ctx's error with the status. It
// returns the status of the run so far with any error.
func Backfill(ctx context.Context, db BackfillDB, p BackfillParams) (BackfillStatus, error) {
	began := time.Now()
	st := BackfillStatus{Name: p.Name, Total: -1}
	if st.Name == "" {
		st.Name = p.Type
	}
	if err := p.validate(); err != nil {
		return st, err
	}
	b := &backfill{db: db, p: p, name: st.Name, st: &st, began: began}
	if b.p.BatchSize == 0 {
		b.p.BatchSize = BackfillBatchSizeDefault
	}
	if p.Rate > 0 {
		// A batch waits for its rows' share of the rate: batches of at
		// most a second's rows keep the pace even.
		b.p.BatchSize = min(b.p.BatchSize, max(1, int(p.Rate)))
		b.limiter = rate.NewLimiter(rate.Limit(p.Rate), b.p.BatchSize)
	}
	err := b.run(ctx)
	st.Elapsed = time.Since(began)
	return st, err
}

// BackfillDB is what Backfill runs on: *pgxpool.Pool and *pgx.Conn satisfy
// it.
type BackfillDB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// BackfillParams says what to backfill.
type BackfillParams struct {
	// Name names the backfill: its progress row, its events' tag and
	// their ids. A run of a name that ran before resumes after its last
	// batch. 1 to 200 characters; empty means Type.
	Name string
	// Type is every event's type; a run of a name that ran before must
	// give the same.
	Type string
	// Version is the version of Type's data that the query's data column
	// holds (Event.Version: 1 to VersionMax; 0 means 1). Live appenders at
	// version 3 backfill at version 3, or their old rows reach handlers
	// through the upcasters of version 1.
	Version int
	// Query returns the rows, with these columns and no other:
	//   - id: unique, of any type with an order (bigint, text, uuid, …):
	//     the rows are read in its order, and it names the row;
	//   - key: the event's key, of any type (as text; NULL is refused:
	//     coalesce(key, '') for events without one);
	//   - data: the event's data, jsonb or json, not NULL;
	//   - tags (optional): text[], the event's tags (name=value);
	//   - occurred_at (optional): timestamptz, timestamp or date; NULL
	//     means the time of the append.
	// It is read as a subquery, FROM (Query) AS q WHERE q.id > $last
	// ORDER BY q.id LIMIT BatchSize, so an index on the id column makes
	// each batch a short index scan.
	Query string
	// BatchSize is the rows read and appended per transaction; zero means
	// BackfillBatchSizeDefault. With Rate, batches hold at most a second's
	// rows.
	BatchSize int
	// Rate bounds the rows appended per second; zero means no bound.
	Rate float64
	// Count counts the rows left, with one scan of the query before the
	// first batch, for BackfillStatus.Total. A count cut short by the
	// session's statement_timeout leaves Total unknown.
	Count bool
	// DryRun reads and checks the rows a run would read (after the last id
	// of a backfill that ran before) and counts what would be appended,
	// appending nothing and writing no progress.
	DryRun bool
	// Progress, when set, is called once the run knows where it starts
	// and after each batch, from Backfill's goroutine.
	Progress func(BackfillStatus)
}

// BackfillBatchSizeDefault is the rows of a batch when BatchSize is zero;
// BackfillBatchSizeMax is the most BatchSize may be.
const (
	BackfillBatchSizeDefault = 1000
	BackfillBatchSizeMax     = 100_000
)

// BackfillNameMaxLength bounds a backfill's name, in characters; the
// database enforces the same.
const BackfillNameMaxLength = 200

// BackfillTagName is the name of the tag every backfilled event carries:
// BackfillTagName=<the backfill's name>. A pool created with that tag sees
// only the backfill's events.
const BackfillTagName = "backfill"

// BackfillMetadataName and BackfillMetadataID are the keys of a
// backfilled event's metadata: the backfill's name and the row's id as
// text.
const (
	BackfillMetadataName = "backfill"
	BackfillMetadataID   = "backfill_id"
)

// BackfillTag returns the tag of the events of the backfill name.
func BackfillTag(name string) string { return BackfillTagName + "=" + name }

// backfillNamespace is the UUIDv5 namespace of backfilled events' ids.
var backfillNamespace = uuid.MustParse("6f1b7c52-3d0e-4f7a-9a51-2c8e4b0d9e17")

// BackfillEventID returns the id of the event that the backfill name
// appends for the row whose id reads id as text: a UUIDv5 of both, so
// every run appends a row under the same id.
func BackfillEventID(name, id string) uuid.UUID {
	return uuid.NewSHA1(backfillNamespace, []byte(name+"\x00"+id))
}

// BackfillStatus is where a backfill run stands.
type BackfillStatus struct {
	// Name is the backfill's name.
	Name string
	// Resumed: the run went on after ResumedAfter, the last id an earlier
	// run appended; Before is the rows earlier runs appended.
	Resumed      bool
	ResumedAfter string
	Before       int64
	// Appended is the rows this run appended as events (with DryRun, the
	// rows it would append); Already the rows whose event was there.
	Appended, Already int64
	// Total is the rows left when the run began (Count); -1 when unknown.
	Total int64
	// Batches is the batches this run committed.
	Batches int
	// LastID is the id of the last row read, as text.
	LastID string
	// Finished: the run reached the end of the query's rows.
	Finished bool
	// Elapsed is the run's time so far.
	Elapsed time.Duration
}

// Rows is the rows this run has read and handled: Appended + Already.
func (s BackfillStatus) Rows() int64 { return s.Appended + s.Already }

// ErrInvalidBackfill is matched by every *BackfillError.
var ErrInvalidBackfill = errors.New("outbox: invalid backfill")

// BackfillError is a backfill's query, or a row of it, that cannot become
// an event; nothing of the row's batch was appended. It matches
// ErrInvalidBackfill.
type BackfillError struct {
	// Name is the backfill's name.
	Name string
	// Row: the error is about one row, whose id reads ID (a NULL id when
	// Column is "id" and ID is empty); otherwise it is about the query.
	Row bool
	ID  string
	// Column names the column at fault ("id", "key", "data", "tags",
	// "occurred_at"), or is empty for the query as a whole.
	Column string
	// Reason says what is wrong.
	Reason string

	err error // the database's error, when it refused the query
}

func (e *BackfillError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "outbox: backfill %q: ", e.Name)
	switch {
	case e.Row && e.ID == "" && e.Column == "id":
		b.WriteString("a row with a NULL id: ")
	case e.Row:
		fmt.Fprintf(&b, "row id %s: ", e.ID)
	default:
		b.WriteString("query: ")
	}
	if e.Column != "" {
		b.WriteString(e.Column + " ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Is reports whether target is ErrInvalidBackfill.
func (e *BackfillError) Is(target error) bool { return target == ErrInvalidBackfill }

// Unwrap returns the database's error, when it refused the query.
func (e *BackfillError) Unwrap() error { return e.err }

func (p BackfillParams) validate() error {
	invalid := func(field, reason string) error {
		return &ValidationError{Index: -1, Field: "BackfillParams." + field, Reason: reason}
	}
	if p.Name != "" {
		if reason := checkText(p.Name); reason != "" {
			return invalid("Name", reason)
		}
		if n := utf8.RuneCountInString(p.Name); n > BackfillNameMaxLength {
			return invalid("Name", fmt.Sprintf("must be at most %d characters, got %d", BackfillNameMaxLength, n))
		}
	}
	if field, reason := checkType("Type", p.Type); reason != "" {
		return invalid(field, reason)
	}
	if p.Version < 0 || p.Version > VersionMax {
		return invalid("Version", fmt.Sprintf("must be 1 to %d (0 means 1), got %d", VersionMax, p.Version))
	}
	if p.Name == "" && utf8.RuneCountInString(p.Type) > BackfillNameMaxLength {
		return invalid("Name", fmt.Sprintf("must be given for a type over %d characters", BackfillNameMaxLength))
	}
	if strings.TrimSpace(backfillQueryText(p.Query)) == "" {
		return invalid("Query", "must not be empty")
	}
	if reason := checkText(p.Query); reason != "" {
		return invalid("Query", reason)
	}
	if p.BatchSize < 0 || p.BatchSize > BackfillBatchSizeMax {
		return invalid("BatchSize", fmt.Sprintf("must be between 1 and %d (0: %d), got %d", BackfillBatchSizeMax, BackfillBatchSizeDefault, p.BatchSize))
	}
	if p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0) {
		return invalid("Rate", fmt.Sprintf("must be a number of rows per second, 0 or more, got %v", p.Rate))
	}
	return nil
}

// backfillQueryText is the query as a subquery takes it: without the
// semicolons and blanks it may end with.
func backfillQueryText(q string) string {
	return strings.TrimRight(q, "; \t\r\n")
}

// backfill is one run of Backfill.
type backfill struct {
	db      BackfillDB
	p       BackfillParams
	name    string
	st      *BackfillStatus
	began   time.Time
	limiter *rate.Limiter

	// From the query's columns (describe).
	idType               string // the id's type, as format_type names it
	hasTags, hasOccurred bool
	firstSQL, nextSQL    string // a batch from the start, and after $1

	last *string // the last id appended, nil before the first batch
}

func (b *backfill) run(ctx context.Context) error {
	if err := b.describe(ctx); err != nil {
		return err
	}
	if err := b.start(ctx); err != nil {
		return err
	}
	if b.last == nil {
		if err := b.checkNullIDs(ctx); err != nil {
			return err
		}
	}
	if b.p.Count {
		if err := b.count(ctx); err != nil {
			return err
		}
	}
	b.progress()
	for {
		if b.limiter != nil {
			if err := b.limiter.WaitN(ctx, b.p.BatchSize); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("backfill %q: wait for the rate: %w", b.name, err)
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rows, err := b.read(ctx)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return b.finish(ctx)
		}
		events, err := b.events(rows)
		if err != nil {
			return err
		}
		// The batch goes on once begun: a stop between its statements
		// would only roll it back, and the next run would read it again.
		if err := b.commit(context.WithoutCancel(ctx), rows, events); err != nil {
			return err
		}
		b.progress()
	}
}

func (b *backfill) progress() {
	if b.p.Progress != nil {
		b.st.Elapsed = time.Since(b.began)
		b.p.Progress(*b.st)
	}
}

// The column types a backfill takes, by the OIDs PostgreSQL describes
// them with (a domain is described as its base type).
var (
	backfillDataTypes     = map[uint32]bool{pgtype.JSONBOID: true, pgtype.JSONOID: true}
	backfillTagsTypes     = map[uint32]bool{pgtype.TextArrayOID: true, pgtype.VarcharArrayOID: true}
	backfillOccurredTypes = map[uint32]bool{pgtype.TimestamptzOID: true, pgtype.TimestampOID: true, pgtype.DateOID: true}
)

// describe reads the query's columns (the query runs with LIMIT 0), checks
// them and builds the batch statements.
func (b *backfill) describe(ctx context.Context) error {
	query := backfillQueryText(b.p.Query)
	var fields []pgconn.FieldDescription
	err := b.readOnly(ctx, func(tx pgx.Tx) error {
		// A newline before the parenthesis: the query may end with a
		// -- comment.
		rows, err := tx.Query(ctx, "SELECT * FROM (\n"+query+"\n) AS q LIMIT 0")
		if err != nil {
			return err
		}
		// A copy: the connection reuses the slice for the next statement.
		fields = slices.Clone(rows.FieldDescriptions())
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, f := range fields {
			if f.Name == "id" {
				return tx.QueryRow(ctx, `SELECT format_type($1::oid, nullif($2::int, -1))`, f.DataTypeOID, f.TypeModifier).Scan(&b.idType)
			}
		}
		return nil
	})
	if err != nil {
		return b.queryError(err)
	}
	seen := map[string]bool{}
	for _, f := range fields {
		reason := ""
		switch {
		case seen[f.Name]:
			reason = "is returned twice"
		case f.Name == "data" && !backfillDataTypes[f.DataTypeOID]:
			reason = "must be jsonb or json (cast it: data::jsonb)"
		case f.Name == "tags" && !backfillTagsTypes[f.DataTypeOID]:
			reason = "must be text[] (cast it: tags::text[])"
		case f.Name == "occurred_at" && !backfillOccurredTypes[f.DataTypeOID]:
			reason = "must be timestamptz, timestamp or date"
		case f.Name != "id" && f.Name != "key" && f.Name != "data" && f.Name != "tags" && f.Name != "occurred_at":
			reason = "is not one a backfill takes: id, key, data and optionally tags and occurred_at"
		}
		if reason != "" {
			return &BackfillError{Name: b.name, Column: f.Name, Reason: reason}
		}
		seen[f.Name] = true
	}
	for _, col := range []string{"id", "key", "data"} {
		if !seen[col] {
			return &BackfillError{Name: b.name, Column: col, Reason: "is missing: the query must return the columns id, key and data"}
		}
	}
	b.hasTags, b.hasOccurred = seen["tags"], seen["occurred_at"]

	inner, outer := "q.id, q.key, q.data", "s.key::text, s.data::text"
	if b.hasTags {
		inner += ", q.tags"
		outer += ", s.tags::text[]"
	}
	if b.hasOccurred {
		inner += ", q.occurred_at"
		outer += ", s.occurred_at::timestamptz"
	}
	// Each row says whether its id equals the previous row's (a duplicate
	// id) and, after the first batch, whether it is the last id appended:
	// the read starts at that id, not after it, so that a duplicate of it
	// is seen too.
	lastArg := "CAST($1::text AS " + b.idType + ")"
	batch := func(isLast, where, limit string) string {
		return "SELECT s.id::text, " + isLast + ", coalesce(s.id = lag(s.id) OVER (ORDER BY s.id), false), " + outer +
			"\nFROM (SELECT " + inner + " FROM (\n" + query + "\n) AS q" + where + " ORDER BY q.id LIMIT " + limit + ") AS s ORDER BY s.id"
	}
	b.firstSQL = batch("false", "", "$1")
	b.nextSQL = batch("coalesce(s.id = "+lastArg+", false)", " WHERE q.id >= "+lastArg, "$2")
	return nil
}

// queryError makes the database's refusal of the query a *BackfillError;
// a connection's failure stays what it is.
func (b *backfill) queryError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("backfill %q: read the query: %w", b.name, err)
	}
	switch pgErr.Code {
	case pgerrcode.ReadOnlySQLTransaction:
		return &BackfillError{Name: b.name, Reason: "must not write: " + pgErr.Message, err: err}
	case pgerrcode.UndefinedFunction:
		if strings.Contains(pgErr.Message, "ordering operator") {
			return &BackfillError{Name: b.name, Column: "id", Reason: "must be of a type with an order: " + pgErr.Message, err: err}
		}
	}
	if strings.HasPrefix(pgErr.Code, "42") || strings.HasPrefix(pgErr.Code, "22") {
		// Syntax errors and access rule violations, data exceptions: the
		// query's, not the connection's.
		return &BackfillError{Name: b.name, Reason: pgErr.Message, err: err}
	}
	return fmt.Errorf("backfill %q: read the query: %w", b.name, err)
}

// readOnly runs f in a READ ONLY transaction of b.db.
func (b *backfill) readOnly(ctx context.Context, f func(pgx.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// start reads the backfill's progress row, creating it unless this is a
// dry run, and refuses a type other than the one it was started with.
func (b *backfill) start(ctx context.Context) error {
	var (
		typ      string
		last     *string
		appended int64
		found    bool
	)
	read := func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT type, last_id, rows_appended FROM riverbus_backfill WHERE name = $1`, b.name).Scan(&typ, &last, &appended)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	}
	var err error
	if b.p.DryRun {
		err = b.readOnly(ctx, read)
	} else {
		err = inTx(ctx, txBeginner{b.db}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO riverbus_backfill (name, type, query) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`,
				b.name, b.p.Type, b.p.Query); err != nil {
				return err
			}
			if err := read(tx); err != nil {
				return err
			}
			if typ != b.p.Type {
				return nil
			}
			_, err := tx.Exec(ctx, `UPDATE riverbus_backfill SET query = $2 WHERE name = $1 AND query IS DISTINCT FROM $2`, b.name, b.p.Query)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("backfill %q: read its progress: %w", b.name, translateError(err))
	}
	if found && typ != b.p.Type {
		return &BackfillError{Name: b.name, Reason: fmt.Sprintf("was started with type %q, not %q: give this one another name", typ, b.p.Type)}
	}
	b.last = last
	b.st.Before = appended
	if last != nil {
		b.st.Resumed, b.st.ResumedAfter, b.st.LastID = true, *last, *last
	}
	return nil
}

// txBeginner begins a read-write transaction of a BackfillDB, for inTx.
type txBeginner struct{ db BackfillDB }

func (t txBeginner) Begin(ctx context.Context) (pgx.Tx, error) {
	return t.db.BeginTx(ctx, pgx.TxOptions{})
}

// checkNullIDs refuses a query with a row whose id is NULL: the keyset
// would never read it. With an index on the id column it reads the index.
func (b *backfill) checkNullIDs(ctx context.Context) error {
	var null bool
	err := b.readOnly(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM (\n"+backfillQueryText(b.p.Query)+"\n) AS q WHERE q.id IS NULL)").Scan(&null)
	})
	if err != nil {
		return b.queryError(err)
	}
	if null {
		return &BackfillError{Name: b.name, Row: true, Column: "id", Reason: "cannot be read in id order: give every row an id, or leave these rows out (WHERE id IS NOT NULL)"}
	}
	return nil
}

// count counts the rows after the last id appended.
func (b *backfill) count(ctx context.Context) error {
	sql, args := "SELECT count(*) FROM (\n"+backfillQueryText(b.p.Query)+"\n) AS q", []any{}
	if b.last != nil {
		sql += " WHERE q.id > CAST($1::text AS " + b.idType + ")"
		args = append(args, *b.last)
	}
	err := b.readOnly(ctx, func(tx pgx.Tx) error { return tx.QueryRow(ctx, sql, args...).Scan(&b.st.Total) })
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.QueryCanceled && ctx.Err() == nil {
		b.st.Total = -1 // the count took longer than statement_timeout: no ETA
		return nil
	}
	if err != nil {
		return b.queryError(err)
	}
	return nil
}

// backfillRow is a row of a batch as read.
type backfillRow struct {
	id          pgtype.Text
	isLast, dup bool
	key, data   pgtype.Text
	tags        []pgtype.Text
	occurredAt  pgtype.Timestamptz
}

// read reads the next batch: up to BatchSize rows after the last id, in id
// order, in a READ ONLY transaction. A duplicate id is refused; the row of
// the last id, which the read starts at, is left out.
func (b *backfill) read(ctx context.Context) ([]backfillRow, error) {
	var rows []backfillRow
	err := b.readOnly(ctx, func(tx pgx.Tx) error {
		var (
			res pgx.Rows
			err error
		)
		if b.last == nil {
			res, err = tx.Query(ctx, b.firstSQL, b.p.BatchSize)
		} else {
			// One more row than a batch: the last id's own.
			res, err = tx.Query(ctx, b.nextSQL, *b.last, b.p.BatchSize+1)
		}
		if err != nil {
			return err
		}
		for res.Next() {
			var r backfillRow
			dest := []any{&r.id, &r.isLast, &r.dup, &r.key, &r.data}
			if b.hasTags {
				dest = append(dest, &r.tags)
			}
			if b.hasOccurred {
				dest = append(dest, &r.occurredAt)
			}
			if err := res.Scan(dest...); err != nil {
				res.Close()
				return err
			}
			rows = append(rows, r)
		}
		return res.Err()
	})
	if err != nil {
		return nil, b.queryError(err)
	}
	out := rows[:0]
	for _, r := range rows {
		switch {
		case !r.id.Valid:
			return nil, &BackfillError{Name: b.name, Row: true, Column: "id", Reason: "cannot be read in id order: give every row an id, or leave these rows out (WHERE id IS NOT NULL)"}
		case r.dup:
			return nil, &BackfillError{Name: b.name, Row: true, ID: r.id.String, Column: "id", Reason: "is not unique: more than one row has it"}
		case r.isLast:
			continue
		}
		out = append(out, r)
	}
	return out[:min(len(out), b.p.BatchSize)], nil
}

// events makes the events of a batch, checked as Append checks them; the
// first row that fails is a *BackfillError naming its id and column.
func (b *backfill) events(rows []backfillRow) ([]Event, error) {
	events := make([]Event, len(rows))
	tag := BackfillTag(b.name)
	for i, r := range rows {
		id := r.id.String
		bad := func(column, reason string) error {
			return &BackfillError{Name: b.name, Row: true, ID: id, Column: column, Reason: reason}
		}
		if !r.key.Valid {
			return nil, bad("key", "must not be NULL: coalesce(key, '') appends the event without a key")
		}
		if !r.data.Valid {
			return nil, bad("data", "must not be NULL: an event's data is a JSON value ('null'::jsonb for JSON null)")
		}
		tags := make([]string, 0, len(r.tags)+1)
		for j, t := range r.tags {
			if !t.Valid {
				return nil, bad(fmt.Sprintf("tags[%d]", j+1), "must not be NULL")
			}
			tags = append(tags, t.String)
		}
		tags = append(tags, tag)
		metadata, err := json.Marshal(map[string]string{BackfillMetadataName: b.name, BackfillMetadataID: id})
		if err != nil {
			return nil, fmt.Errorf("backfill %q: encode metadata: %w", b.name, err)
		}
		e := Event{EventID: BackfillEventID(b.name, id), Type: b.p.Type, Key: r.key.String, Tags: tags,
			Data: json.RawMessage(r.data.String), Metadata: metadata, Version: b.p.Version}
		if r.occurredAt.Valid {
			if r.occurredAt.InfinityModifier != pgtype.Finite {
				return nil, bad("occurred_at", "must be a finite time, got infinity")
			}
			e.OccurredAt = r.occurredAt.Time
		}
		if err := validateEvents([]Event{e}); err != nil {
			var v *ValidationError
			if errors.As(err, &v) {
				return nil, bad(backfillColumn(v.Field), v.Reason)
			}
			return nil, err
		}
		events[i] = e
	}
	return events, nil
}

// backfillColumn names the column of the query that gives an event's
// field; a tag by its SQL subscript (from 1).
func backfillColumn(field string) string {
	var tag int
	if _, err := fmt.Sscanf(field, "Tags[%d]", &tag); err == nil {
		return fmt.Sprintf("tags[%d]", tag+1)
	}
	switch field {
	case "Key":
		return "key"
	case "Data":
		return "data"
	case "OccurredAt":
		return "occurred_at"
	}
	return field
}

// commit appends a batch's events in one transaction with the backfill's
// progress: it locks the progress row, and when another run has moved it
// since the batch was read, appends nothing (the next read starts where
// that run stopped). Events already there are left out and counted.
func (b *backfill) commit(ctx context.Context, rows []backfillRow, events []Event) error {
	lastID := rows[len(rows)-1].id.String
	ids := make([]uuid.UUID, len(events))
	for i, e := range events {
		ids[i] = e.EventID
	}
	var appended, already int64
	moved := false
	work := func(tx pgx.Tx) error {
		if !b.p.DryRun {
			var stored *string
			if err := tx.QueryRow(ctx, `SELECT last_id FROM riverbus_backfill WHERE name = $1 FOR UPDATE`, b.name).Scan(&stored); err != nil {
				return fmt.Errorf("lock the progress row: %w", err)
			}
			if !sameID(stored, b.last) {
				moved, b.last = true, stored
				return nil
			}
		}
		rows, err := tx.Query(ctx, `SELECT event_id FROM riverbus_event WHERE event_id = ANY($1::uuid[])`, ids)
		if err != nil {
			return fmt.Errorf("look for events already appended: %w", err)
		}
		there, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return fmt.Errorf("look for events already appended: %w", err)
		}
		fresh := events
		if len(there) > 0 {
			skip := make(map[uuid.UUID]bool, len(there))
			for _, id := range there {
				skip[id] = true
			}
			fresh = make([]Event, 0, len(events))
			for _, e := range events {
				if !skip[e.EventID] {
					fresh = append(fresh, e)
				}
			}
		}
		appended, already = int64(len(fresh)), int64(len(events)-len(fresh))
		if b.p.DryRun {
			return nil
		}
		if len(fresh) > 0 {
			actx, span := startAppend(ctx, "Backfill", len(fresh))
			res, err := appendTx(actx, tx, fresh, span)
			span.end(res, err)
			if err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `UPDATE riverbus_backfill SET last_id = $2, rows_appended = rows_appended + $3,
			rows_already = rows_already + $4, updated_at = now() WHERE name = $1`, b.name, lastID, appended, already)
		if err != nil {
			return fmt.Errorf("record the progress: %w", err)
		}
		return nil
	}
	var err error
	if b.p.DryRun {
		err = b.readOnly(ctx, work)
	} else {
		err = inTx(ctx, txBeginner{b.db}, work)
	}
	if err != nil {
		return fmt.Errorf("backfill %q: batch after id %s: %w", b.name, describeLast(b.last), err)
	}
	if moved {
		return nil
	}
	b.last = &lastID
	b.st.LastID = lastID
	b.st.Appended += appended
	b.st.Already += already
	b.st.Batches++
	return nil
}

func sameID(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// describeLast names where a batch starts, for an error.
func describeLast(last *string) string {
	if last == nil {
		return "(none: the first batch)"
	}
	return *last
}

// finish checks that no row has a NULL id (the keyset never read one) and
// records that the backfill reached the end of its rows.
func (b *backfill) finish(ctx context.Context) error {
	if err := b.checkNullIDs(ctx); err != nil {
		return err
	}
	if !b.p.DryRun {
		ctx := context.WithoutCancel(ctx)
		if err := inTx(ctx, txBeginner{b.db}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE riverbus_backfill SET finished_at = now(), updated_at = now() WHERE name = $1`, b.name)
			return err
		}); err != nil {
			return fmt.Errorf("backfill %q: record the end: %w", b.name, err)
		}
	}
	b.st.Finished = true
	b.progress()
	return nil
}
