package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

// backfilled is one event a backfill appended, as the log holds it.
type backfilled struct {
	seq        int64
	event      outbox.Event
	name, id   string // from the metadata
	occurredAt time.Time
}

// backfilledEvents returns the events of the backfill name in sequence
// order.
func backfilledEvents(t *testing.T, db *pgxpool.Pool, name string) []backfilled {
	t.Helper()
	events, err := outbox.Read(context.Background(), db, outbox.ReadParams{Query: outbox.Query{{Tags: []string{outbox.BackfillTag(name)}}}})
	require.NoError(t, err)
	out := make([]backfilled, len(events))
	for i, e := range events {
		var md map[string]string
		require.NoError(t, json.Unmarshal(e.Metadata, &md))
		out[i] = backfilled{seq: e.GlobalSequence, event: e, name: md[outbox.BackfillMetadataName], id: md[outbox.BackfillMetadataID], occurredAt: e.OccurredAt}
	}
	return out
}

// ids returns the row ids of events, in their order.
func ids(events []backfilled) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.id
	}
	return out
}

func exec(t *testing.T, db *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := db.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// idTable creates table with the ids 1 to n and returns a backfill query
// of its rows.
func idTable(t *testing.T, db *pgxpool.Pool, table string, n int) string {
	t.Helper()
	exec(t, db, fmt.Sprintf(`CREATE TABLE %s AS SELECT i AS id FROM generate_series(1, %d) AS i`, table, n))
	return fmt.Sprintf(`SELECT id, 'k' AS key, '{}'::jsonb AS data FROM %s`, table)
}

// A backfill appends one event per row, in id order, in batches: the
// row's key, data, tags and occurred_at, the backfill's type, a tag naming
// the backfill, metadata naming the row, and an id derived from both.
func TestBackfillAppendsEachRowOnceInIDOrder(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	db := bundle.db
	exec(t, db, `CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, region text, created timestamptz NOT NULL)`)
	// Ids with holes, inserted out of order.
	exec(t, db, `INSERT INTO customers SELECT i * 3, 'c' || i, CASE WHEN i % 2 = 0 THEN 'eu' END, '2020-01-01 00:00+00'::timestamptz + i * interval '1 day'
		FROM generate_series(25, 1, -1) AS i`)
	query := `SELECT id, 'customer-' || id AS key, jsonb_build_object('name', name) AS data,
		CASE WHEN region IS NOT NULL THEN ARRAY['region=' || region] END AS tags, created AS occurred_at
		FROM customers -- a trailing comment
		;`
	var seen []outbox.BackfillStatus
	st, err := outbox.Backfill(ctx, db, outbox.BackfillParams{Type: "customer.imported", Version: 3, Query: query, BatchSize: 10, Count: true,
		Progress: func(s outbox.BackfillStatus) { seen = append(seen, s) }})
	require.NoError(t, err)
	require.Equal(t, "customer.imported", st.Name, "the name defaults to the type")
	require.Equal(t, int64(25), st.Appended)
	require.Zero(t, st.Already)
	require.Equal(t, int64(25), st.Total)
	require.Equal(t, 3, st.Batches)
	require.Equal(t, "75", st.LastID)
	require.True(t, st.Finished)
	require.False(t, st.Resumed)
	// Once at the start, once per batch, once at the end.
	require.Len(t, seen, 5)
	require.Zero(t, seen[0].Batches)
	require.Equal(t, int64(10), seen[1].Appended)
	require.Equal(t, int64(20), seen[2].Appended)

	events := backfilledEvents(t, db, "customer.imported")
	require.Len(t, events, 25)
	for i, e := range events {
		id := fmt.Sprint((i + 1) * 3)
		require.Equal(t, id, e.id, "events in id order")
		require.Equal(t, "customer.imported", e.name)
		require.Equal(t, outbox.BackfillEventID("customer.imported", id), e.event.EventID)
		require.Equal(t, "customer.imported", e.event.Type)
		require.Equal(t, 3, e.event.Version)
		require.Equal(t, "customer-"+id, e.event.Key)
		require.JSONEq(t, fmt.Sprintf(`{"name": "c%d"}`, i+1), string(e.event.Data))
		if (i+1)%2 == 0 {
			require.Equal(t, []string{"region=eu", "backfill=customer.imported"}, e.event.Tags)
		} else {
			require.Equal(t, []string{"backfill=customer.imported"}, e.event.Tags)
		}
		require.True(t, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i+1).Equal(e.occurredAt), "occurred_at %s", e.occurredAt)
	}
	var progress struct {
		last               string
		appended, already  int64
		finished, typ, qry bool
	}
	require.NoError(t, db.QueryRow(ctx, `SELECT last_id, rows_appended, rows_already, finished_at IS NOT NULL, type = $2, query = $3
		FROM riverbus_backfill WHERE name = $1`, "customer.imported", "customer.imported", query).
		Scan(&progress.last, &progress.appended, &progress.already, &progress.finished, &progress.typ, &progress.qry))
	require.Equal(t, "75", progress.last)
	require.Equal(t, int64(25), progress.appended)
	require.True(t, progress.finished && progress.typ && progress.qry)

	// A run again appends only the rows added since above the last id; a
	// row added below it is not read (the keyset resumes after the last id).
	exec(t, db, `INSERT INTO customers VALUES (1, 'below', NULL, now()), (100, 'above', NULL, now())`)
	st, err = outbox.Backfill(ctx, db, outbox.BackfillParams{Type: "customer.imported", Query: query, BatchSize: 10})
	require.NoError(t, err)
	require.True(t, st.Resumed)
	require.Equal(t, "75", st.ResumedAfter)
	require.Equal(t, int64(25), st.Before)
	require.Equal(t, int64(1), st.Appended)
	require.Equal(t, int64(-1), st.Total, "not counted")
	events = backfilledEvents(t, db, "customer.imported")
	require.Len(t, events, 26)
	require.Equal(t, "100", events[25].id)
}

// A run stopped between batches (its context ended, as a kill would end
// it at any point) resumes after the last batch that committed: every row
// once.
func TestBackfillResumesAfterTheLastCommittedBatch(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	db := bundle.db
	exec(t, db, `CREATE TABLE items AS SELECT i AS id, i % 7 AS k FROM generate_series(1, 95) AS i`)
	params := outbox.BackfillParams{Name: "items", Type: "item.seen", Query: `SELECT id, k AS key, to_jsonb(id) AS data FROM items`, BatchSize: 10}

	runCtx, cancel := context.WithCancel(ctx)
	p := params
	p.Progress = func(s outbox.BackfillStatus) {
		if s.Batches == 4 {
			cancel()
		}
	}
	st, err := outbox.Backfill(runCtx, db, p)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 4, st.Batches)
	require.Equal(t, int64(40), st.Appended)
	require.False(t, st.Finished)
	require.Len(t, backfilledEvents(t, db, "items"), 40)

	st, err = outbox.Backfill(ctx, db, params)
	require.NoError(t, err)
	require.True(t, st.Resumed)
	require.Equal(t, "40", st.ResumedAfter)
	require.Equal(t, int64(55), st.Appended)
	require.Zero(t, st.Already, "the second run reads none of the first's rows again")
	require.True(t, st.Finished)
	events := backfilledEvents(t, db, "items")
	require.Len(t, events, 95)
	for i, e := range events {
		require.Equal(t, fmt.Sprint(i+1), e.id)
	}
}

// The id may be of any type with an order: each batch starts after the
// last id cast back to the id's own type, so text ids follow their
// collation, not their bytes, and numbers their value, not their text.
func TestBackfillIDsOfEachType(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	db := bundle.db
	for _, c := range []struct {
		name, table string
		want        []string
	}{
		{name: "bigint", table: `SELECT * FROM (VALUES (10::bigint), (9), (100), (-5), (11)) AS v(id)`, want: []string{"-5", "9", "10", "11", "100"}},
		{name: "numeric", table: `SELECT * FROM (VALUES (1.5::numeric), (1.25), (10), (2)) AS v(id)`, want: []string{"1.25", "1.5", "2", "10"}},
		{name: "text", table: `SELECT * FROM (VALUES ('b'::text), ('a b'), ('A'), ('10'), ('9'), ('é'), ('it''s')) AS v(id)`},
		{name: "varchar", table: `SELECT * FROM (VALUES ('x'::varchar(5)), ('y'), ('w')) AS v(id)`, want: []string{"w", "x", "y"}},
		{name: "uuid", table: `SELECT * FROM (VALUES ('00000000-0000-0000-0000-000000000002'::uuid), ('00000000-0000-0000-0000-000000000010'), ('00000000-0000-0000-0000-000000000001')) AS v(id)`,
			want: []string{"00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002", "00000000-0000-0000-0000-000000000010"}},
		{name: "timestamptz", table: `SELECT * FROM (VALUES ('2024-01-02 03:04:05.123456+00'::timestamptz), ('2023-01-01+00'), ('2024-01-02 03:04:05.123457+00')) AS v(id)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			exec(t, db, fmt.Sprintf(`CREATE TABLE ids_%s AS %s`, c.name, c.table))
			want := c.want
			if want == nil {
				rows, err := db.Query(ctx, fmt.Sprintf(`SELECT id::text FROM ids_%s ORDER BY id`, c.name))
				require.NoError(t, err)
				want, err = pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
			}
			// Batches of 2 put a batch boundary after most ids.
			st, err := outbox.Backfill(ctx, db, outbox.BackfillParams{Name: c.name, Type: "id.test",
				Query: fmt.Sprintf(`SELECT id, '' AS key, '{}'::json AS data FROM ids_%s`, c.name), BatchSize: 2})
			require.NoError(t, err)
			require.Equal(t, int64(len(want)), st.Appended)
			require.Equal(t, want, ids(backfilledEvents(t, db, c.name)))
		})
	}
}

// A query or a row that cannot become an event stops the run with an
// error that names the row's id and the column, and appends nothing of
// its batch; once fixed, a run resumes at that batch.
func TestBackfillRefusesBadRows(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	db := bundle.db
	exec(t, db, `CREATE SEQUENCE bump`)
	for _, c := range []struct {
		name string
		// bad is the query's column list and the WHERE of the bad row
		// (id 15, in the second batch of 10): the row is "fixed" by
		// leaving it out.
		cols   string
		row    bool
		id     string
		column string
		reason string
	}{
		{name: "null_key", cols: `id, CASE WHEN id = 15 THEN NULL ELSE 'k' END AS key, '{}'::jsonb AS data`, row: true, id: "15", column: "key", reason: "must not be NULL"},
		{name: "long_key", cols: `id, CASE WHEN id = 15 THEN repeat('k', 1025) ELSE 'k' END AS key, '{}'::jsonb AS data`, row: true, id: "15", column: "key", reason: "must be at most 1024 bytes"},
		{name: "null_data", cols: `id, 'k' AS key, CASE WHEN id = 15 THEN NULL ELSE '{}'::jsonb END AS data`, row: true, id: "15", column: "data", reason: "must not be NULL"},
		{name: "nul_in_json", cols: `id, 'k' AS key, CASE WHEN id = 15 THEN '{"a": "\u0000"}'::json ELSE '{}'::json END AS data`, row: true, id: "15", column: "data", reason: `\u0000`},
		{name: "bad_tag", cols: `id, 'k' AS key, '{}'::jsonb AS data, CASE WHEN id = 15 THEN ARRAY['no-value'] END AS tags`, row: true, id: "15", column: "tags[1]", reason: "name=value"},
		{name: "null_tag", cols: `id, 'k' AS key, '{}'::jsonb AS data, CASE WHEN id = 15 THEN ARRAY['a=b', NULL] END AS tags`, row: true, id: "15", column: "tags[2]", reason: "must not be NULL"},
		{name: "infinite_time", cols: `id, 'k' AS key, '{}'::jsonb AS data, CASE WHEN id = 15 THEN 'infinity'::timestamptz ELSE now() END AS occurred_at`, row: true, id: "15", column: "occurred_at", reason: "finite"},
		{name: "duplicate_id", cols: `CASE WHEN id = 15 THEN 14 ELSE id END AS id, 'k' AS key, '{}'::jsonb AS data`, row: true, id: "14", column: "id", reason: "not unique"},
		// 10 and 11 are the same id across the first batch's boundary.
		{name: "duplicate_at_boundary", cols: `CASE WHEN id = 11 THEN 10 ELSE id END AS id, 'k' AS key, '{}'::jsonb AS data`, row: true, id: "10", column: "id", reason: "not unique"},
	} {
		t.Run(c.name, func(t *testing.T) {
			table := "rows_" + c.name
			idTable(t, db, table, 30)
			params := outbox.BackfillParams{Name: c.name, Type: "row.test", BatchSize: 10,
				Query: fmt.Sprintf(`SELECT %s FROM %s`, c.cols, table)}
			st, err := outbox.Backfill(ctx, db, params)
			require.ErrorIs(t, err, outbox.ErrInvalidBackfill)
			var bad *outbox.BackfillError
			require.ErrorAs(t, err, &bad)
			require.Equal(t, c.row, bad.Row, "%v", err)
			require.Equal(t, c.id, bad.ID, "%v", err)
			require.Equal(t, c.column, bad.Column, "%v", err)
			require.Contains(t, bad.Reason, c.reason)
			require.Contains(t, err.Error(), fmt.Sprintf("row id %s: %s", c.id, c.column))
			// The first batch, 1 to 10, is appended; nothing of the second.
			require.Equal(t, int64(10), st.Appended)
			require.Len(t, backfilledEvents(t, db, c.name), 10)

			// Fixed (the bad row left out), the next run resumes there.
			exec(t, db, fmt.Sprintf(`DELETE FROM %s WHERE id IN (11, 15)`, table))
			st, err = outbox.Backfill(ctx, db, params)
			require.NoError(t, err)
			require.Equal(t, "10", st.ResumedAfter)
			require.Equal(t, int64(18), st.Appended)
			require.Len(t, backfilledEvents(t, db, c.name), 28)
		})
	}

	t.Run("null_id", func(t *testing.T) {
		// A NULL id sorts last and never passes q.id > $last: it is looked
		// for before the first batch, and again at the end.
		exec(t, db, `CREATE TABLE null_ids AS SELECT nullif(i, 3) AS id FROM generate_series(1, 25) AS i`)
		params := outbox.BackfillParams{Type: "row.test", Name: "null_id", BatchSize: 10,
			Query: `SELECT id, 'k' AS key, '{}'::jsonb AS data FROM null_ids`}
		st, err := outbox.Backfill(ctx, db, params)
		var bad *outbox.BackfillError
		require.ErrorAs(t, err, &bad)
		require.Equal(t, "id", bad.Column)
		require.Contains(t, err.Error(), "a row with a NULL id: id cannot be read in id order")
		require.Zero(t, st.Appended, "refused before the first batch")

		exec(t, db, `DELETE FROM null_ids WHERE id IS NULL`)
		st, err = outbox.Backfill(ctx, db, params)
		require.NoError(t, err)
		require.Equal(t, int64(24), st.Appended)
		// A row with a NULL id that appears later is found at the end of
		// the next run, which then does not say it finished.
		exec(t, db, `INSERT INTO null_ids VALUES (NULL), (26)`)
		st, err = outbox.Backfill(ctx, db, params)
		require.ErrorAs(t, err, &bad)
		require.Equal(t, "id", bad.Column)
		require.Equal(t, int64(1), st.Appended)
		require.False(t, st.Finished)
	})

	for _, c := range []struct {
		name, query, column, reason string
	}{
		{name: "missing_key", query: `SELECT id, '{}'::jsonb AS data FROM generate_series(1, 3) AS id`, column: "key", reason: "is missing"},
		{name: "unknown_column", query: `SELECT id, 'k' AS key, '{}'::jsonb AS data, 1 AS tag FROM generate_series(1, 3) AS id`, column: "tag", reason: "is not one a backfill takes"},
		{name: "twice", query: `SELECT id, 'k' AS key, 'j' AS key, '{}'::jsonb AS data FROM generate_series(1, 3) AS id`, column: "key", reason: "twice"},
		{name: "text_data", query: `SELECT id, 'k' AS key, '{}'::text AS data FROM generate_series(1, 3) AS id`, column: "data", reason: "jsonb or json"},
		{name: "int_tags", query: `SELECT id, 'k' AS key, '{}'::jsonb AS data, ARRAY[1] AS tags FROM generate_series(1, 3) AS id`, column: "tags", reason: "text[]"},
		{name: "unordered_id", query: `SELECT '{}'::json AS id, 'k' AS key, '{}'::jsonb AS data`, column: "id", reason: "a type with an order"},
		{name: "writes", query: `SELECT id, 'k' AS key, '{}'::jsonb AS data FROM generate_series(1, 3) AS id WHERE nextval('bump') > 0`, reason: "must not write"},
		{name: "syntax", query: `SELECT id, key, data FRM nowhere`, reason: "syntax error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := outbox.Backfill(ctx, db, outbox.BackfillParams{Name: c.name, Type: "row.test", Query: c.query})
			require.ErrorIs(t, err, outbox.ErrInvalidBackfill)
			var bad *outbox.BackfillError
			require.ErrorAs(t, err, &bad)
			require.False(t, bad.Row, "%v", err)
			require.Equal(t, c.column, bad.Column, "%v", err)
			require.Contains(t, bad.Reason, c.reason)
			require.Zero(t, st.Appended)
			require.Empty(t, backfilledEvents(t, db, c.name))
		})
	}
	var bumped int64
	require.NoError(t, db.QueryRow(ctx, `SELECT last_value FROM bump`).Scan(&bumped))
	require.Equal(t, int64(1), bumped, "the query that writes never ran in a transaction that could write")
}

// Two runs of one backfill at once take turns on its progress row: every
// row is appended once, by one of them.
func TestBackfillConcurrentRunsOfOneName(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	db := bundle.db
	params := outbox.BackfillParams{Name: "many", Type: "many.seen", BatchSize: 7, Query: idTable(t, db, "many", 300)}
	const runs = 4
	var wg sync.WaitGroup
	results := make([]outbox.BackfillStatus, runs)
	errs := make([]error, runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = outbox.Backfill(ctx, db, params)
		}()
	}
	wg.Wait()
	var appended, already int64
	for i := range runs {
		require.NoError(t, errs[i])
		require.True(t, results[i].Finished)
		appended += results[i].Appended
		already += results[i].Already
	}
	require.Equal(t, int64(300), appended, "the runs appended every row once between them")
	require.Zero(t, already, "no run read a batch another had appended")
	events := backfilledEvents(t, db, "many")
	require.Len(t, events, 300)
	seen := map[string]bool{}
	for _, e := range events {
		require.False(t, seen[e.id], "row %s appended twice", e.id)
		seen[e.id] = true
	}
}

// A row whose event is there is not appended again, even by a run that
// starts from the beginning because its progress row was lost: it counts
// as already there.
func TestBackfillSkipsRowsAlreadyAppended(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	db := bundle.db
	params := outbox.BackfillParams{Name: "again", Type: "again.seen", BatchSize: 15, Query: idTable(t, db, "again", 40)}
	_, err := outbox.Backfill(ctx, db, params)
	require.NoError(t, err)
	exec(t, db, `DELETE FROM riverbus_backfill WHERE name = 'again'`)
	exec(t, db, `INSERT INTO again VALUES (41)`)

	st, err := outbox.Backfill(ctx, db, params)
	require.NoError(t, err)
	require.False(t, st.Resumed)
	require.Equal(t, int64(1), st.Appended)
	require.Equal(t, int64(40), st.Already)
	require.Len(t, backfilledEvents(t, db, "again"), 41)
	var already int64
	require.NoError(t, db.QueryRow(ctx, `SELECT rows_already FROM riverbus_backfill WHERE name = 'again'`).Scan(&already))
	require.Equal(t, int64(40), already)
}

// A backfill keeps its type: a run of the same name with another type is
// refused (another backfill needs another name).
func TestBackfillRefusesAnotherTypeUnderItsName(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	query := `SELECT id, 'k' AS key, '{}'::jsonb AS data FROM generate_series(1, 3) AS id`
	_, err := outbox.Backfill(ctx, bundle.db, outbox.BackfillParams{Name: "b", Type: "one", Query: query})
	require.NoError(t, err)
	_, err = outbox.Backfill(ctx, bundle.db, outbox.BackfillParams{Name: "b", Type: "two", Query: query})
	require.ErrorIs(t, err, outbox.ErrInvalidBackfill)
	require.ErrorContains(t, err, `was started with type "one", not "two"`)
}

// A dry run reads and checks every row and appends nothing, not even its
// progress.
func TestBackfillDryRunAppendsNothing(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	db := bundle.db
	params := outbox.BackfillParams{Name: "dry", Type: "dry.seen", BatchSize: 5, DryRun: true, Count: true, Query: idTable(t, db, "dry", 12)}
	st, err := outbox.Backfill(ctx, db, params)
	require.NoError(t, err)
	require.Equal(t, int64(12), st.Appended, "what would be appended")
	require.Equal(t, int64(12), st.Total)
	require.True(t, st.Finished)
	require.Zero(t, countEvents(t, db))
	var rows int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM riverbus_backfill`).Scan(&rows))
	require.Zero(t, rows)

	// A bad row is found by the dry run.
	exec(t, db, `INSERT INTO dry VALUES (13)`)
	params.Query = `SELECT id, CASE WHEN id = 13 THEN NULL ELSE 'k' END AS key, '{}'::jsonb AS data FROM dry`
	_, err = outbox.Backfill(ctx, db, params)
	require.ErrorContains(t, err, "row id 13: key must not be NULL")
}

// With a rate, batches hold at most a second's rows.
func TestBackfillRateMakesSmallBatches(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	st, err := outbox.Backfill(ctx, bundle.db, outbox.BackfillParams{Name: "slow", Type: "slow.seen", BatchSize: 100, Rate: 4,
		Query: `SELECT id, 'k' AS key, '{}'::jsonb AS data FROM generate_series(1, 8) AS id`})
	require.NoError(t, err)
	require.Equal(t, int64(8), st.Appended)
	require.Equal(t, 2, st.Batches)
}

func TestBackfillRefusesBadParams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	query := `SELECT 1 AS id, 'k' AS key, '{}'::jsonb AS data`
	long := strings.Repeat("n", 201)
	for _, c := range []struct {
		p     outbox.BackfillParams
		field string
	}{
		{outbox.BackfillParams{Query: query}, "BackfillParams.Type"},
		{outbox.BackfillParams{Type: "t"}, "BackfillParams.Query"},
		{outbox.BackfillParams{Type: "t", Query: " ;\n"}, "BackfillParams.Query"},
		{outbox.BackfillParams{Type: "t", Query: query, BatchSize: -1}, "BackfillParams.BatchSize"},
		{outbox.BackfillParams{Type: "t", Query: query, BatchSize: outbox.BackfillBatchSizeMax + 1}, "BackfillParams.BatchSize"},
		{outbox.BackfillParams{Type: "t", Query: query, Rate: -1}, "BackfillParams.Rate"},
		{outbox.BackfillParams{Type: "t", Query: query, Version: outbox.VersionMax + 1}, "BackfillParams.Version"},
		{outbox.BackfillParams{Type: "t", Query: query, Name: long}, "BackfillParams.Name"},
		{outbox.BackfillParams{Type: "t", Query: query, Name: "a\x00b"}, "BackfillParams.Name"},
	} {
		// No database: the params are refused before any SQL.
		_, err := outbox.Backfill(ctx, nil, c.p)
		var v *outbox.ValidationError
		require.True(t, errors.As(err, &v), "%+v: %v", c.p, err)
		require.Equal(t, c.field, v.Field)
		require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	}
}
