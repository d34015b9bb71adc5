package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/testwait"
)

// mark is a row of riverbus_horizon_mark.
type mark struct {
	At               time.Time
	CommittedThrough int64
}

// marks are the horizon's marks, oldest first.
func marks(t *testing.T, b *testBundle) []mark {
	t.Helper()
	rows, err := b.db.Query(context.Background(), `SELECT at, committed_through FROM riverbus_horizon_mark ORDER BY at`)
	require.NoError(t, err)
	ms, err := pgx.CollectRows(rows, pgx.RowToStructByPos[mark])
	require.NoError(t, err)
	return ms
}

// throughs are the marks' committed_through, oldest first.
func throughs(ms []mark) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.CommittedThrough
	}
	return out
}

// markRound runs one round as the horizon service does, with params' mark
// settings.
func markRound(t *testing.T, b *testBundle, params fanout.RoundParams) fanout.RoundResult {
	t.Helper()
	params.PageSize, params.Fast = 100, true
	params.GapTimeout = max(params.GapTimeout, time.Nanosecond)
	res, err := fanout.Advance(context.Background(), b.db, params)
	require.NoError(t, err)
	return res
}

// noMarks deletes the mark the migration wrote, for a test that counts
// marks from none.
func noMarks(t *testing.T, b *testBundle) {
	t.Helper()
	_, err := b.db.Exec(context.Background(), `DELETE FROM riverbus_horizon_mark`)
	require.NoError(t, err)
}

// A round that moves the horizon writes a mark only when the last one is
// MarkInterval old: not one per round. A round that moves nothing writes
// none. Each mark's time is after its events committed (their
// transactions' start, appended_at, is earlier still) and holds the new
// horizon.
func TestHorizonMarksEveryIntervalNotEveryRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	noMarks(t, b)
	hourly := fanout.RoundParams{GapTimeout: time.Hour, MarkInterval: time.Hour}

	s1 := appendEvent(t, b.db, "t")
	require.True(t, markRound(t, b, hourly).Moved)
	ms := marks(t, b)
	require.Equal(t, []int64{s1}, throughs(ms), "the first round that moves marks")
	var appended time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT appended_at FROM riverbus_event WHERE global_sequence = $1`, s1).Scan(&appended))
	require.True(t, ms[0].At.After(appended), "mark %s, event appended %s", ms[0].At, appended)

	for range 3 {
		appendEvent(t, b.db, "t")
		require.True(t, markRound(t, b, hourly).Moved)
	}
	require.Equal(t, []int64{s1}, throughs(marks(t, b)), "rounds within the interval marked")

	// Due (an interval of zero): the next move marks, a round that moves
	// nothing does not.
	due := fanout.RoundParams{GapTimeout: time.Hour}
	s5 := appendEvent(t, b.db, "t")
	require.True(t, markRound(t, b, due).Moved)
	require.Equal(t, []int64{s1, s5}, throughs(marks(t, b)))
	require.False(t, markRound(t, b, due).Moved)
	require.Equal(t, []int64{s1, s5}, throughs(marks(t, b)), "a round that moved nothing marked")
}

// The marks are held to MarkCap: each new one deletes the oldest beyond
// it, so the newest MarkCap stay.
func TestHorizonMarksKeepTheNewestUpToTheCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noMarks(t, b)
	var seqs []int64
	for range 6 {
		seqs = append(seqs, appendEvent(t, b.db, "t"))
		require.True(t, markRound(t, b, fanout.RoundParams{GapTimeout: time.Hour, MarkCap: 3}).Moved)
	}
	require.Equal(t, seqs[3:], throughs(marks(t, b)))
}

// A mark stays below a skipped range: a sequence in it may still commit,
// after the mark, and a rewind to the mark's time must deliver it. Once
// the range is proven (its writer ended), the next mark reaches the
// horizon again.
func TestHorizonMarkStaysBelowSkippedRanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	noMarks(t, b)
	s1 := appendEvent(t, b.db, "t")
	writer, held := openWriter(t, b.db)
	s3 := appendEvent(t, b.db, "t")
	require.Equal(t, []int64{s1 + 1, held + 1}, []int64{held, s3})

	// The first round records the gap at held; the next, its nanosecond
	// timeout passed, skips it.
	skip := fanout.RoundParams{GapTimeout: time.Nanosecond}
	markRound(t, b, skip)
	res := markRound(t, b, skip)
	require.Equal(t, s3, res.Horizon)
	require.Positive(t, count(t, b.db, `SELECT count(*) FROM riverbus_skipped`))
	require.Equal(t, []int64{s1, s1}, throughs(marks(t, b)), "a mark passed the skipped sequence %d", held)

	// The writer commits: its event is late, the range is proven and
	// forgotten, and the next move marks the horizon.
	// xids are the cluster's, so a transaction another test holds open on
	// this server (in its own database) can delay the proof by a round or
	// more; the range must still go once that transaction ends.
	require.NoError(t, writer.Commit(ctx))
	testwait.Eventually(t, time.Minute, func() bool {
		markRound(t, b, skip)
		return count(t, b.db, `SELECT count(*) FROM riverbus_skipped`) == 0
	}, "the skipped range at %d was never forgotten after its writer committed", held)
	s4 := appendEvent(t, b.db, "t")
	require.True(t, markRound(t, b, skip).Moved)
	ms := marks(t, b)
	require.Equal(t, s4, ms[len(ms)-1].CommittedThrough)
}
